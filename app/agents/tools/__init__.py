"""Built-in tools: `calculator` (arithmetic only, no code) and `python_sandbox` (code in an isolated process)."""

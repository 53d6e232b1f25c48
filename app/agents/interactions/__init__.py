"""Built-in interactions: `gsm8k` (checks the latest answer against the row's ground truth; "try again" or done)."""

import subprocess
import sys


def test_engine_imports_nothing_from_ray():
    # the engine is measured alone on GPU machines: importing it (and building a model) must not pull in Ray
    code = (
        "import sys, app.engine.fsdp_engine, app.engine.forward, app.batch; "
        "bad = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')); "
        "assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]

import sys

from support import load_bench_script


def test_the_command_runs_in_its_folder_with_its_output_in_the_log(tmp_path):
    logged_run = load_bench_script("logged_run")
    log = tmp_path / "runs" / "run_0.log"  # the folder does not exist yet
    script = "import os, sys; print('cwd', os.getcwd()); print('oops', file=sys.stderr); sys.exit(3)"
    code, minutes = logged_run.run_logged([sys.executable, "-c", script], log, tmp_path)
    assert code == 3 and 0 <= minutes < 1
    assert sorted(log.read_text().splitlines()) == sorted([f"cwd {tmp_path}", "oops"])  # stdout and stderr both

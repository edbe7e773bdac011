"""The vLLM supervisor: its command line, missing-vllm error, and process handling on a fake."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentworld.errors import MissingExtraError, UpstreamError
from agentworld.serve import vllm_engine
from agentworld.serve.vllm_engine import VllmOptions, VllmServer, vllm_command, vllm_env

ROOT = Path(__file__).resolve().parents[2]

FAKE_VLLM = textwrap.dedent(
    """
    # Stands in for `vllm serve MODEL --host H --port P ...`: answers /health, records RPCs.
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    args = sys.argv[1:]
    assert args[0] == "serve"
    port = int(args[args.index("--port") + 1])
    record = args[args.index("--record") + 1]
    if "--crash" in args:
        print("CUDA out of memory (fake)", file=sys.stderr)
        sys.exit(3)
    if "--hang" in args:  # still loading the model
        import time
        time.sleep(600)
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            import os
            with open(record, "a") as f:
                f.write(json.dumps({"path": self.path, "body": body,
                                    "model": os.path.realpath(args[1]),
                                    "dev": os.environ.get("VLLM_SERVER_DEV_MODE")}) + "\\n")
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"[null]")
    HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_command_line_has_the_flags_the_proxy_needs():
    opts = VllmOptions(model="/m", port=9001, served_model_name="policy", max_model_len=4096)
    cmd = vllm_command(opts, ["vllm"])
    assert cmd[:3] == ["vllm", "serve", "/m"]
    joined = " ".join(cmd)
    for flag in (
        "--port 9001",
        "--host 127.0.0.1",
        "--served-model-name policy default",
        "--enable-auto-tool-choice",
        "--tool-call-parser hermes",
        "--logprobs-mode processed_logprobs",
        "--generation-config vllm",
        "--max-model-len 4096",
    ):
        assert flag in joined
    assert vllm_env({"A": "1"}) == {"A": "1", "VLLM_SERVER_DEV_MODE": "1"}


def test_missing_vllm_raises_missing_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: False)
    with pytest.raises(MissingExtraError, match=r"agentworld\[vllm\]"):
        vllm_engine.vllm_executable()
    server = VllmServer(VllmOptions(model=str(tmp_path)), live_link=tmp_path / "live")
    with pytest.raises(MissingExtraError):
        server.start()


def make_checkpoint(path: Path, version: int | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    if version is not None:
        (path / "meta.json").write_text(json.dumps({"policy_version": version}))
    return path


@pytest.mark.slow
def test_supervises_a_fake_vllm_start_reload_stop(tmp_path: Path):
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_VLLM)
    record = tmp_path / "rpc.jsonl"
    base = make_checkpoint(tmp_path / "base")
    opts = VllmOptions(model=str(base), port=free_port(), extra_args=("--record", str(record)))
    server = VllmServer(
        opts,
        live_link=tmp_path / "run" / "live",
        executable=[sys.executable, str(script)],
        startup_timeout_s=60,
    )
    with server:
        assert server.proc.poll() is None
        assert server.reload(make_checkpoint(tmp_path / "step1")) == 1
        assert server.reload(make_checkpoint(tmp_path / "step2", version=9)) == 9
    assert server.proc.poll() is not None  # stopped on exit
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert [c["path"] for c in calls] == ["/collective_rpc"] * 2
    assert calls[0]["body"] == {"method": "reload_weights"}
    assert calls[0]["dev"] == "1"
    # vLLM re-reads its served path, which now points at the new checkpoint.
    assert calls[0]["model"] == str((tmp_path / "step1").resolve())
    assert calls[1]["model"] == str((tmp_path / "step2").resolve())


@pytest.mark.slow
def test_a_vllm_that_dies_on_start_is_an_upstream_error_with_its_log(tmp_path: Path):
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_VLLM)
    opts = VllmOptions(
        model=str(make_checkpoint(tmp_path / "base")),
        port=free_port(),
        extra_args=("--record", str(tmp_path / "r"), "--crash"),
    )
    server = VllmServer(
        opts,
        live_link=tmp_path / "live",
        executable=[sys.executable, str(script)],
        startup_timeout_s=60,
    )
    with pytest.raises(UpstreamError, match="CUDA out of memory"):
        server.start()


@pytest.mark.slow
def test_interrupted_while_vllm_loads_stops_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Ctrl-C or SIGTERM before vllm is healthy: `with server` was never entered, and vllm
    went on alone, holding the port and the GPU."""
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_VLLM)
    opts = VllmOptions(
        model=str(make_checkpoint(tmp_path / "base")),
        port=free_port(),
        extra_args=("--record", str(tmp_path / "r"), "--hang"),
    )
    server = VllmServer(opts, live_link=tmp_path / "live", executable=[sys.executable, str(script)])

    def interrupt(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    # The first look at /health meets the Ctrl-C (Popen.wait's own sleeps stay as they are).
    monkeypatch.setattr(vllm_engine.urllib.request, "urlopen", interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            server.start()
        assert server.proc.poll() is not None
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()


SUPERVISED_VLLM = textwrap.dedent(
    """
    # `vllm serve ...` for `aw serve --engine vllm`: writes its pid, answers /health, and
    # with FAKE_VLLM_DIE exits 3 once it has said it is healthy.
    import os, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    with open(os.environ["FAKE_VLLM_PID"], "w") as f:
        f.write(str(os.getpid()))
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            if os.environ.get("FAKE_VLLM_DIE"):
                print("engine core died (fake)", file=sys.stderr, flush=True)
                os._exit(3)
    HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def _aw_serve_vllm(tmp_path: Path, model: Path, env: dict[str, str]) -> subprocess.Popen:
    script = tmp_path / "fake_vllm.py"
    script.write_text(SUPERVISED_VLLM)
    code = (
        "import sys; from agentworld.serve import vllm_engine; "
        f"vllm_engine.vllm_executable = lambda: [sys.executable, {str(script)!r}]; "
        "from agentworld.cli import main; main()"
    )
    args = ["serve", "--engine", "vllm", "--model", str(model), "--port", str(free_port())]
    return subprocess.Popen(
        [sys.executable, "-c", code, *args, "--aw-home", str(tmp_path / "home")],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"FAKE_VLLM_PID": str(tmp_path / "pid")} | env,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigterm_to_aw_serve_stops_the_vllm_it_started(tmp_path: Path, tiny_model_dir: Path):
    proc = _aw_serve_vllm(tmp_path, tiny_model_dir, {})
    pid = None
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "aw serve: vllm at" in line:
                break
        pid = int((tmp_path / "pid").read_text())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert not _alive(pid)  # stopped and reaped before aw serve exited
    finally:
        if proc.poll() is None:
            proc.kill()
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_vllm_dying_while_serving_is_an_error_with_its_log(tmp_path: Path, tiny_model_dir: Path):
    """It exited 0 without a word, as if stopped on purpose."""
    proc = _aw_serve_vllm(tmp_path, tiny_model_dir, {"FAKE_VLLM_DIE": "1"})
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == UpstreamError.exit_code
    assert "vllm exited with code 3 while serving" in err
    assert "engine core died (fake)" in err

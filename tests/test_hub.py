"""A Hugging Face model id (issue 21 section 6), against a local HTTP server standing in for the hub.

The server speaks the hub's file protocol (HEAD then GET on /{owner}/{name}/resolve/{revision}/{file}, the
commit and ETag headers, X-Error-Code on refusals) and serves real config files from data/models; the
client is huggingface_hub itself, unmocked, pointed at the server by HF_ENDPOINT with a temporary HF_HOME.
"""
import hashlib
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("huggingface_hub")

from roofline.cli import main  # noqa: E402
from roofline.models.config import MODELS_DIR, load_model  # noqa: E402

SERVED = {"Qwen/Qwen3-8B": "qwen3-8b", "acme/private-llama": "llama-3-8b"}  # repository -> data/models file
GATED, NO_CONFIG, TOKEN = "meta-llama/Llama-3.1-8B", "Qwen/Qwen3-8B-GGUF", "hf_test_token"


class Hub(BaseHTTPRequestHandler):
    requests: list = []

    def log_message(self, *args):  # quiet
        pass

    def _answer(self, with_body: bool):
        Hub.requests.append((self.command, self.path, self.headers.get("Authorization")))
        owner, name, _, _, filename = (self.path.strip("/").split("/", 4) + [""] * 5)[:5]
        repo = f"{owner}/{name}"
        if repo == GATED:
            return self._refuse(403, "GatedRepo")
        if repo == NO_CONFIG:
            return self._refuse(404, "EntryNotFound")
        if repo not in SERVED or (repo.startswith("acme/") and self.headers.get("Authorization") != f"Bearer {TOKEN}"):
            return self._refuse(401, "RepoNotFound")  # the hub's answer to a missing or private repository
        data = (MODELS_DIR / f"{SERVED[repo]}.json").read_bytes()
        self.send_response(200)
        self.send_header("X-Repo-Commit", hashlib.sha1(repo.encode()).hexdigest())
        self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if with_body:
            self.wfile.write(data)

    def _refuse(self, status: int, code: str):
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self):
        self._answer(False)

    def do_GET(self):
        self._answer(True)


@pytest.fixture(scope="module")
def server():
    hub = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{hub.server_port}"
    hub.shutdown()


@pytest.fixture
def hub(server, tmp_path, monkeypatch):
    """The local hub, an empty cache, no token and online."""
    monkeypatch.setenv("HF_ENDPOINT", server)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for name in ("HF_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    Hub.requests.clear()
    return server


def analyze_json(capsys, model: str) -> list[dict]:
    capsys.readouterr()
    assert main(["analyze", "--model", model, "--batch", "1,64", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def refusal(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_a_hub_id_analyzes_as_the_same_config_json_read_from_disk(hub, capsys):
    by_id = analyze_json(capsys, "Qwen/Qwen3-8B")
    by_path = analyze_json(capsys, str(MODELS_DIR / "qwen3-8b.json"))
    assert [{k: v for k, v in row.items() if k != "model"} for row in by_id] == \
           [{k: v for k, v in row.items() if k != "model"} for row in by_path]
    assert by_id[0]["model"] == "Qwen/Qwen3-8B" and ("GET", "/Qwen/Qwen3-8B/resolve/main/config.json", None) in Hub.requests


def test_a_cached_config_is_read_offline_without_asking_the_hub(hub, capsys, monkeypatch):
    online = load_model("Qwen/Qwen3-8B")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    Hub.requests.clear()
    assert load_model("Qwen/Qwen3-8B") == online and Hub.requests == []


def test_offline_without_a_cached_copy_is_one_line_naming_the_id_and_the_fix(hub, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    err = refusal(capsys, ["analyze", "--model", "Qwen/Qwen3-8B"])
    assert "'Qwen/Qwen3-8B'" in err and "HF_HUB_OFFLINE is set" in err and "fix:" in err and Hub.requests == []


def test_a_gated_repository_says_to_accept_its_terms_and_set_a_token(hub, capsys):
    err = refusal(capsys, ["analyze", "--model", GATED])
    assert f"'{GATED}'" in err and "gated" in err and "HF_TOKEN" in err


def test_a_missing_repository_and_a_repository_without_config_json_say_so(hub, capsys):
    err = refusal(capsys, ["analyze", "--model", "nobody/no-such-model"])
    assert "'nobody/no-such-model'" in err and "no such repository" in err and "fix:" in err
    err = refusal(capsys, ["analyze", "--model", NO_CONFIG])
    assert f"'{NO_CONFIG}'" in err and "has no config.json" in err


def test_a_private_repository_is_fetched_with_hf_token(hub, capsys, monkeypatch):
    assert "no such repository" in refusal(capsys, ["analyze", "--model", "acme/private-llama"])
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert load_model("acme/private-llama").d_model == 4096
    assert ("GET", "/acme/private-llama/resolve/main/config.json", f"Bearer {TOKEN}") in Hub.requests


def test_plan_takes_a_hub_id(hub, capsys):
    capsys.readouterr()
    code = main(["plan", "--model", "Qwen/Qwen3-8B", "--hardware", "h100-sxm", "--tp", "1", "--weights", "bf16"])
    assert code == 0 and capsys.readouterr().out.startswith("Qwen/Qwen3-8B: ")


def test_a_local_path_shaped_like_an_id_stays_a_path(tmp_path, monkeypatch):
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "model").mkdir()
    (tmp_path / "org" / "model" / "config.json").write_text((MODELS_DIR / "llama-3-8b.json").read_text())
    monkeypatch.chdir(tmp_path)
    assert load_model("org/model").d_model == 4096  # a snapshot directory, not a download


def test_importing_roofline_does_not_import_huggingface_hub():
    code = "import sys, roofline, roofline.models.config; print('huggingface_hub' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"

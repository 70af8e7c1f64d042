"""A Hugging Face model id ('Qwen/Qwen3-8B'): its config.json, fetched and cached by huggingface_hub.

The optional extra `roofline[hub]`; imported only when an id is asked for, so `import roofline` stays light.
huggingface_hub's own cache (HF_HOME, HF_HUB_CACHE) holds the file: a second run, or a run under
HF_HUB_OFFLINE=1, reads it there. A token comes from HF_TOKEN or `hf auth login`. Every failure (offline
and not cached, gated, missing, the extra not installed) is one ValueError naming the id and the fix.
Environment variables are read at each call, not when huggingface_hub was first imported.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
from functools import lru_cache
from pathlib import Path

# owner/name as the hub spells repository ids: letters, digits, '-', '_', '.'; neither part starts with '.' or '-'.
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}")
TRUE = ("1", "true", "yes", "on")
SETTINGS = ("HF_ENDPOINT", "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN")  # what a fetch depends on


def is_hub_id(text: str) -> bool:
    """Whether `text` reads as a hub repository id and names no local file or directory."""
    return bool(HUB_ID.fullmatch(text)) and not text.endswith(".json") and not Path(text).exists()


def config_path(repo_id: str) -> Path:
    """The local path of the repository's config.json, downloaded into the cache unless already there
    (once per process for the same id and settings: plan and report load the model many times)."""
    return _config_path(repo_id, *(os.environ.get(key) for key in SETTINGS))


@lru_cache(maxsize=64)
def _config_path(repo_id: str, *settings) -> Path:
    fix_offline = ("run once with the network (HF_HUB_OFFLINE unset) to cache it, or pass a config.json path")
    try:
        # hf_hub_download named here: huggingface_hub imports lazily and sets its loggers' level on that import
        from huggingface_hub import errors, hf_hub_download
    except ImportError:
        raise ValueError(f"model {repo_id!r}: a Hugging Face id needs huggingface_hub; fix: pip install "
                         f"'roofline[hub]', or pass a config.json path") from None
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in TRUE
    try:
        with _quiet(logging.getLogger("huggingface_hub")):  # its retry warnings would break the one-line answer
            return Path(hf_hub_download(
                repo_id, "config.json", endpoint=os.environ.get("HF_ENDPOINT") or None, cache_dir=_cache_dir(),
                token=os.environ.get("HF_TOKEN") or None, local_files_only=offline))
    except errors.GatedRepoError:
        raise ValueError(f"model {repo_id!r}: the repository is gated; fix: accept its terms on its hub page, then "
                         f"set HF_TOKEN to a token of that account") from None
    except errors.RepositoryNotFoundError:
        raise ValueError(f"model {repo_id!r}: no such repository on the hub, or a private one; fix: check the id "
                         f"(owner/name, as on huggingface.co), or set HF_TOKEN for a private repository") from None
    except errors.LocalEntryNotFoundError:  # before EntryNotFoundError, its base class
        why = "HF_HUB_OFFLINE is set" if offline else "the hub could not be reached"
        raise ValueError(f"model {repo_id!r}: its config.json is not in the Hugging Face cache and {why}; "
                         f"fix: {fix_offline}") from None
    except (errors.EntryNotFoundError, errors.RevisionNotFoundError):
        raise ValueError(f"model {repo_id!r}: the repository has no config.json; fix: name the model's own "
                         f"repository (not a GGUF or adapter one), or pass a config.json path") from None
    except errors.HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", "an error")
        raise ValueError(f"model {repo_id!r}: the hub answered {status}; fix: retry later, or pass a config.json "
                         f"path") from None
    except (OSError, ValueError) as err:  # a cache folder that cannot be written, an id the client refuses
        reason = " ".join(str(err).split())  # one line
        raise ValueError(f"model {repo_id!r}: cannot fetch its config.json ({reason}); fix: check the id and that "
                         f"the cache (HF_HOME) is writable, or pass a config.json path") from None


@contextlib.contextmanager
def _quiet(logger: logging.Logger):
    """Errors only from `logger` for the duration (its level restored after)."""
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _cache_dir() -> str | None:
    """HF_HUB_CACHE, else HF_HOME/hub, as read now (huggingface_hub reads them once, when imported)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME")
    return str(Path(home) / "hub") if home else None

"""JSON and YAML a user hands in (a config.json, a hardware file, an upload; a calibration, a price sheet):
parsed, or one ValueError naming the file.

Python's json and PyYAML's parsers recurse once per nesting level, so 200,000 `[` raise RecursionError;
and a file deep enough to parse can still overflow the stack in the code that walks it. No input file
nests more than a few levels, so anything beyond MAX_DEPTH is refused by name.
"""
from __future__ import annotations

import json

import yaml

MAX_DEPTH = 64  # a Hugging Face config nests 3-4 levels (text_config.rope_scaling); 64 leaves room


def parse_json(content: str | bytes, where: str, fix: str) -> object:
    """The parsed document; bad encoding, bad syntax or too deep a nesting is one line: where, what, fix."""
    try:
        text = content.decode("utf-8") if isinstance(content, bytes) else content
        document = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{where}: cannot read JSON, not a JSON file ({one_line(err)}); fix: {fix}") from None
    except RecursionError:  # the parser recursed once per level and ran out of stack
        raise ValueError(f"{where}: JSON nested more than {MAX_DEPTH} levels deep; fix: {fix}") from None
    if _deeper_than(document, MAX_DEPTH):
        raise ValueError(f"{where}: JSON nested more than {MAX_DEPTH} levels deep; fix: {fix}")
    return document

def _deeper_than(document, limit: int) -> bool:
    """Whether lists and objects nest more than `limit` levels (walked without recursion)."""
    stack = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (list, dict)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return False


def one_line(err: Exception) -> str:
    """A parser's message (YAML's spans several lines, with a caret) as one line."""
    return " ".join(str(err).split())


def parse_yaml(content: str | bytes, where: str, fix: str) -> object:
    """The parsed YAML document (safe_load), or one line: where, what, fix."""
    try:
        text = content.decode("utf-8") if isinstance(content, bytes) else content
        document = yaml.safe_load(text)
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"{where}: cannot read YAML ({one_line(err)}); fix: {fix}") from None
    except RecursionError:
        raise ValueError(f"{where}: YAML nested more than {MAX_DEPTH} levels deep; fix: {fix}") from None
    if _deeper_than(document, MAX_DEPTH):
        raise ValueError(f"{where}: YAML nested more than {MAX_DEPTH} levels deep; fix: {fix}")
    return document


def sourced_section(raw: dict, where: str, section: str, keys: tuple, plain: tuple = ()) -> tuple[dict, dict]:
    """An engine file's section of `{value, source}` entries (a bare value is taken too) as (values, sources).

    `keys` are the sourced entries, `plain` the keys taken as they stand (a rule's name); anything else is refused
    in one line naming the section and the keys it holds.
    """
    allowed = (*plain, *keys)
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: {section} must be a mapping ({', '.join(allowed)})")
    unknown = sorted(str(k) for k in set(raw) - set(allowed))
    if unknown:
        raise ValueError(f"{where}: {section} has unknown keys {unknown}; use {', '.join(allowed)}")
    values = {name: raw[name] for name in plain if raw.get(name) is not None}
    sources = {}
    for name in keys:
        entry = raw.get(name)
        if entry is None:
            continue
        values[name] = entry.get("value") if isinstance(entry, dict) else entry
        if isinstance(entry, dict) and entry.get("source"):
            sources[name] = str(entry["source"])
    return values, sources

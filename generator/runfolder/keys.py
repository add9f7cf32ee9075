"""Content keys of a run folder: the short hashes that manifests and ``run.json`` record of the config and the
source a scene was made with, so that a reader can tell a mixed run (``RunReader``) and a committer what it
committed under (``commit``)."""
from __future__ import annotations

import hashlib
import json


def text_key(text: str | bytes) -> str:
    """A short content hash (config.yaml, source.json): what manifests and run.json record."""
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha1(data).hexdigest()[:16]


_CONFIG_KEYS: dict[str, str] = {}


def config_key(cfg) -> str:
    """The key of a PipelineConfig: the hash of the ``config.yaml`` it is written as. Memoised by the config's
    JSON form (a millisecond; the YAML dump takes ~50: regeneration asks once per batch)."""
    js = cfg.model_dump_json()
    if js not in _CONFIG_KEYS:
        if len(_CONFIG_KEYS) > 64:
            _CONFIG_KEYS.clear()
        _CONFIG_KEYS[js] = text_key(cfg.to_yaml())
    return _CONFIG_KEYS[js]


def source_key(desc: dict) -> str:
    """The key of a source description (``source.json``), independent of its formatting."""
    return text_key(json.dumps(desc, sort_keys=True))

"""The browser engine's text front-end, chunking and SentencePiece tokenizer (static/engine, run in
Node) against tts_core's on a seeded corpus in Latin, Chinese and Japanese script: normalised text,
language, token ids and chunks must be identical for every text."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from support.browser_text_corpus import corpus
from support.e2e_helpers import browser_unavailable

from tts_core.export.web import tokenizer_json
from tts_core.text import detect_language, normalize_text, split_text
from tts_core.tokenizer import TextTokenizer

ROOT = Path(__file__).resolve().parents[2]
NODE = shutil.which("node")
if NODE is None:
    browser_unavailable("node not found: install nodejs (scripts/test.sh does) to test static/engine")


@pytest.fixture(scope="module")
def results(data_dir):
    model = data_dir / "hf_checkpoint_meta" / "tokenizer.model"
    texts = corpus()
    payload = json.dumps({"tokenizer": tokenizer_json(model), "texts": texts})
    done = subprocess.run([NODE, str(ROOT / "tests" / "support" / "browser_text_run.mjs")], input=payload, capture_output=True,
                          text=True, timeout=300, check=True)
    return texts, json.loads(done.stdout), TextTokenizer.from_file(model)


def test_corpus_covers_three_scripts(results):
    texts, _, _ = results
    languages = {detect_language(t) for t in texts}
    assert {"en", "zh", "ja"} <= languages


def test_tokenizer_ids_equal_sentencepiece(results):
    texts, js, tokenizer = results
    bad = [(t, r["ids"], tokenizer.encode(t)) for t, r in zip(texts, js) if r["ids"] != tokenizer.encode(t)]
    assert not bad, bad[:3]


def test_normalized_text_and_language_equal_python(results):
    texts, js, tokenizer = results
    bad = []
    for text, r in zip(texts, js):
        language = detect_language(text)
        expected = normalize_text(text, language=language)
        if (r["language"], r["normalized"]) != (language, expected):
            bad.append((text, r["normalized"], expected))
        elif r["normalizedIds"] != tokenizer.encode(expected):
            bad.append((text, r["normalizedIds"], tokenizer.encode(expected)))
    assert not bad, bad[:3]


def test_chunks_equal_python(results):
    _, js, tokenizer = results
    count = lambda t: len(tokenizer.encode(t))  # noqa: E731
    bad = [(r["normalized"], r["chunks"], split_text(r["normalized"], count, 20)) for r in js
           if r["chunks"] != split_text(r["normalized"], count, 20)]
    assert not bad, bad[:3]

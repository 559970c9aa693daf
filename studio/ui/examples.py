"""The page's example sentences: (button label, text, language); the first English one fills the
text box on a first visit (the page is English and starts with an English voice)."""

from __future__ import annotations

EXAMPLES = [
    ("English", "Streaming speech starts playing while the rest of the sentence is still being generated.",
     "English"),
    ("中文", "今天天气很好，我们一起去公园散步吧。路上还可以买一杯热咖啡。", "Chinese"),
    ("日本語", "こんにちは。今日はいい天気ですね。一緒に散歩に行きませんか。", "Japanese"),
    ("English, longer", "The quick brown fox jumps over the lazy dog. Then it takes a long nap in the afternoon "
     "sun.", "English"),
]
DEFAULT_TEXT = EXAMPLES[0][1]

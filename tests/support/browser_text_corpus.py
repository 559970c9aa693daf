"""A seeded corpus of mixed-script text (Latin, Chinese, Japanese, markup, numbers, URLs) for
holding the browser engine's text front-end and tokenizer to the Python ones."""

from __future__ import annotations

import random

FIXED = [
    "Hello world, this is a parity test for MOSS TTS Nano.",
    "今天天气很好，我们一起去公园散步吧。",
    "こんにちは、世界！今日はいい天気ですね。カタカナもテスト。",
    "I have 3 apples and 1,234 pears, i.e. 50% more... Really?!",
    "2024年有2个人，价格是3.14元，增长了12.5％。第2名。",
    "# Heading\n- bullet one\n> a quote\n1. numbered [link](https://example.com/a_b?x=1).",
    "Visit https://moss.ai/docs, mail me at a.b@c.io or ping @someone about r/python #tag.",
    "The file config.yaml and v1.2.3 -> next — done -- yes【注意】「引用」《标题》",
    "  spaces   and\ttabs\r\nnew lines  ",
    "ＡＢＣ１２３ ﬁ ① ㈱ ｶﾀｶﾅ",
    "emoji 😀 and zero\u200bwidth\ufeff chars",
    "<user_inst>\n- Reference(s):\n",
    "中文English混合123测试",
    "",
]

_PIECES = [
    "hello", "World", "MOSS", "tts", "v2.0", "file.txt", "a_b", "x/y", "1", "42", "3.5", "1,000", "99%", "2024",
    "今天", "我们", "公园", "第2", "个", "年", "中文", "测试", "こんにちは", "カタカナ", "ひらがな", "日本語",
    ",", ".", "!", "?", "...", "，", "。", "！", "？", "、", "：", "；", "…", "—", "--", "->", "→", "(", ")",
    "（", "）", "【", "】", "「", "」", "《", "》", "\"", "'", "“", "”", "[", "]", "{", "}", "#", "@", "-",
    " ", " ", " ", "  ", "\n", "\t", "\u3000", "https://a.io/x", "me@x.org", "# ", "- ", "> ", "1. ",
]


def corpus(count: int = 300, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    texts = list(FIXED)
    for _ in range(count):
        texts.append("".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 14))))
    return texts

"""Text that arrives as it is written (a voice agent's LLM), spoken as it comes: the library side of
the voice-agent sockets (`studio/agents/`). No HTTP here.

`cutting` finds where speech can start in a growing text; `context.SpeechContext` turns one
utterance's text into one continuous audio stream, a `Stream` per piece, one at a time;
`joins` fades the pieces' edges; `words` estimates word times within a piece's audio span;
`session.SpeakingSession` holds a client's contexts within its limits.
"""

from .context import Piece, SpeechContext
from .cutting import TextBuffer
from .session import SessionLimits, SpeakingSession
from .words import WordTime, estimate_word_times

__all__ = ["Piece", "SessionLimits", "SpeakingSession", "SpeechContext", "TextBuffer", "WordTime",
           "estimate_word_times"]

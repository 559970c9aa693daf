"""Voice-agent sockets: text streams in, audio streams out, for the stock clients of Pipecat and
LiveKit Agents. Thin protocol adapters over `tts_core.speaking` (one text-in core); the audio goes
out through `delivery.stream_pump.StreamPump` and `delivery.speech_output.SpeechRender`, as every
other response's does. See docs/API.md ("Voice agents").
"""

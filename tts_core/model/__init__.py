"""Native PyTorch implementations of the MOSS-TTS-Nano LM and the MOSS-Audio-Tokenizer-Nano codec."""

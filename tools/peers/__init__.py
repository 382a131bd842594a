"""llama.cpp side by side (issue 37)."""

"""An OpenCLIP model's converter: its two towers, its tokenizer and its image preprocessing."""

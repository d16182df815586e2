"""A ``CrossEncoder``'s converter: converter.py the kind's; a causal LM scored by its next
token (logit_score.py); a pair through the model's chat template (chat_template.py); what
the library gives, for the parity check (reference.py)."""

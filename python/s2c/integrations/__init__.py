"""Framework integrations (Hugging Face transformers: `s2c.integrations.hf`)."""

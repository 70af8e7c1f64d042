"""Model configs: the architecture facts (config), and the Hugging Face family readers."""

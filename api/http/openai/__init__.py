"""OpenAI compatibility: the request/response shapes of OpenAI's embeddings and models
API, its error shape, and the vector encodings it offers. The routes are in
``api/routes/openai.py``."""

"""One endpoint object per operation, as each API asks for it: check -> ask -> respond,
inside one envelope (``envelope.py``: timing, the kind's check, the key's charge, one
admission slot, the embedding service within the deadline, headers). The HTTP routes of
every API (native, OpenAI's, TEI's) call these objects, and a batch job's lines call the
same ones (:attr:`Endpoints.batch`), so the bulk path never climbs into the HTTP face.

- ``embed.py``: ``/infer`` (texts and images), ``/infer_image``, ``/v1/embeddings``, TEI's
  ``/embed``, ``/embed_sparse``, ``/embed_all``;
- ``rerank.py``: ``/rerank``, ``/v1/rerank``, TEI's ``/rerank``;
- ``predict.py``: ``/predict``, TEI's ``/predict``;
- ``similarity.py``, ``tokens.py``: TEI's ``/similarity``, ``/tokenize``, ``/decode``;
- ``cohere.py``: Cohere's ``/v2/embed`` (texts, images, inputs of parts) and ``/v2/rerank``;
- ``schemas/``: the bodies of these routes, as each API defines them;
- ``statuses.py``: the one table from domain errors to statuses; ``timing.py``,
  ``rate_limits.py``, ``vectors.py``: headers and encodings every answer shares.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..compute.requests.served import ServedModel
from ..compute.service import EmbeddingService
from ..models.first_request import FirstRequestLoads
from ..models.registry import ModelRegistry
from ..settings import Settings
from .cohere import CohereEmbed, CohereRerank
from .embed import Infer, InferUploads, OpenAIEmbed, TeiEmbed, TeiEmbedAll, TeiEmbedSparse
from .envelope import Answered, Endpoint, Parts, Unloaded
from .predict import Predict, TeiPredict
from .rerank import Rerank, TeiRerank
from .similarity import TeiSimilarity
from .tei import only_loaded
from .tokens import TeiDecode, TeiTokenize


class TeiEndpoints:
    """TEI's routes under one base URL, and the model a base URL serves."""

    def __init__(self, parts: Parts):
        self.parts = parts
        self.embed = TeiEmbed(parts)
        self.embed_sparse = TeiEmbedSparse(parts)
        self.embed_all = TeiEmbedAll(parts)
        self.similarity = TeiSimilarity(parts)
        self.rerank = TeiRerank(parts)
        self.predict = TeiPredict(parts)
        self.tokenize = TeiTokenize(parts)
        self.decode = TeiDecode(parts)

    def model_named(self, key: str) -> ServedModel | Unloaded:
        """The model ``/tei/<model>`` names (where loads on a first request are on, one in
        the repository not loaded yet is loaded by whatever answers the request)."""
        return self.embed.model_named(key)

    def default_model(self) -> ServedModel | Unloaded:
        """The model ``/tei`` serves: EMBEDGATE_TEI_MODEL, else the only loaded model."""
        chosen = self.parts.settings.tei_model
        return self.model_named(chosen) if chosen else only_loaded(self.parts.registry)

    async def for_model(
        self, model: ServedModel | Unloaded, timeout_s: float, answer: Callable[[ServedModel, float], Awaitable[Answered]]
    ) -> Answered:
        """``answer`` for a base URL's model (``Endpoint.for_model``): the /info route's, and
        the base URL's, which reads the model's kind before it knows which route it is."""
        return await self.embed.for_model(model, timeout_s, answer)


class Endpoints:
    """Every endpoint of one gateway, made once its parts exist."""

    def __init__(
        self, registry: ModelRegistry, service: EmbeddingService, settings: Settings,
        first_requests: FirstRequestLoads | None = None,
    ):
        parts = Parts(registry, service, settings, first_requests)
        self.infer = Infer(parts)
        self.infer_uploads = InferUploads(parts)
        self.embeddings = OpenAIEmbed(parts)
        self.rerank = Rerank(parts)
        self.predict = Predict(parts)
        self.tei = TeiEndpoints(parts)
        self.cohere_embed = CohereEmbed(parts)
        self.cohere_rerank = CohereRerank(parts)
        # What a batch job's lines may call, by URL: the same objects as the routes.
        self.batch: dict[str, Endpoint] = {
            "/v1/embeddings": self.embeddings, "/v1/rerank": self.rerank, "/v2/embed": self.cohere_embed,
        }

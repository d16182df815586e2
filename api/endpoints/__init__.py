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

from ..compute.service import EmbeddingService
from ..models.first_request import FirstRequestLoads
from ..models.registry import ModelRegistry
from ..settings import Settings
from .cohere import CohereEmbed, CohereRerank
from .embed import Infer, InferUploads, OpenAIEmbed, TeiEmbed, TeiEmbedAll, TeiEmbedSparse
from .envelope import Endpoint, Parts
from .predict import Predict, TeiPredict
from .rerank import Rerank, TeiRerank
from .similarity import TeiSimilarity
from .tokens import TeiDecode, TeiTokenize


class TeiEndpoints:
    """TEI's routes under one base URL."""

    def __init__(self, parts: Parts):
        self.embed = TeiEmbed(parts)
        self.embed_sparse = TeiEmbedSparse(parts)
        self.embed_all = TeiEmbedAll(parts)
        self.similarity = TeiSimilarity(parts)
        self.rerank = TeiRerank(parts)
        self.predict = TeiPredict(parts)
        self.tokenize = TeiTokenize(parts)
        self.decode = TeiDecode(parts)


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

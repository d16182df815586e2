"""TEI's ``/tokenize`` and ``/decode``: the model's own tokenizer on texts (each token's id,
text and byte span) and on ids back, in the tokenizer pool. No model runs, so no slot of
the model's in-flight limit is taken and nothing is charged (a model not loaded yet is
loaded first, where loads on a first request are on, within the request's deadline)."""

from __future__ import annotations

from dataclasses import asdict

from ..compute.requests.prompts import PromptChoice
from ..compute.requests.served import ServedModel
from ..errors import Empty
from .envelope import Answer, Unloaded
from .schemas.tei import TeiDecodeRequest, TeiTokenizeRequest, non_empty
from .tei import TeiEndpoint


class TeiTokenize(TeiEndpoint[TeiTokenizeRequest]):
    async def __call__(
        self, body: TeiTokenizeRequest, timeout_s: float, model: ServedModel | Unloaded | None = None
    ) -> Answer:
        assert model is not None
        return await self.for_model(model, timeout_s, lambda model, _: self.tokenize(body, model))

    async def tokenize(self, body: TeiTokenizeRequest, model: ServedModel) -> Answer:
        texts = non_empty(body.inputs)
        self.limit(len(texts))
        tokens = await self.service.tokens.tokenize(
            model, texts, prompt=PromptChoice(prompt_name=body.prompt_name), add_special_tokens=body.add_special_tokens
        )
        return Answer([[asdict(token) for token in row] for row in tokens], {})


class TeiDecode(TeiEndpoint[TeiDecodeRequest]):
    async def __call__(
        self, body: TeiDecodeRequest, timeout_s: float, model: ServedModel | Unloaded | None = None
    ) -> Answer:
        assert model is not None
        return await self.for_model(model, timeout_s, lambda model, _: self.decode(body, model))

    async def decode(self, body: TeiDecodeRequest, model: ServedModel) -> Answer:
        ids, _ = body.batch()
        if not ids or not all(ids):
            raise Empty("`ids` cannot be empty")
        self.limit(len(ids))
        texts = await self.service.tokens.decode(model, ids, skip_special_tokens=body.skip_special_tokens)
        return Answer(texts, {})

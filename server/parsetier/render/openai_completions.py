"""An OpenAI completions request (``/v1/completions``) as a ``Conversation`` with a prompt.

The prompt is text, encoded with the tokenizer's own special tokens (its BOS, as the model's
serving stack adds it), or token ids used as given. One prompt per request: a batch of prompts
is several requests (INVALID_ARGUMENT names the field).
"""

from __future__ import annotations

from parsetier.render.common import MAX_N, common_sampling, stops
from parsetier.render.conversation import Conversation
from parsetier.render.errors import BadRequest
from parsetier.render.fields import Obj, join, kind

REFUSED = {
    "echo": "echo is not supported (the prompt is not part of the output)",
    "suffix": "suffix is not supported",
    "logit_bias": "logit_bias is not supported",
}


def _ids(value: list, path: str) -> list[int]:
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < 2**32:
            raise BadRequest(join(path, i), f"expected a token id, got {kind(item)}")
    return value


def read(body: Obj) -> Conversation:
    conv = Conversation("openai_completions")
    for key, why in REFUSED.items():
        body.refuse(key, why)
    prompt = body.raw("prompt")
    path = body.at("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt, path = prompt[0], join(path, 0)
    if isinstance(prompt, str):
        conv.prompt_text = prompt
    elif isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt):
        conv.prompt_ids = _ids(prompt, path)
    elif isinstance(prompt, list) and len(prompt) > 1:
        raise BadRequest(path, f"one prompt per request; got {len(prompt)} (send each as its own request)")
    else:
        raise BadRequest(path, f"expected a string or an array of token ids, got {kind(prompt)}")
    best_of = body.integer("best_of", minimum=1)
    common_sampling(body, conv)
    s = conv.sampling
    s.max_tokens = body.integer("max_tokens", minimum=1, maximum=2**32 - 1)
    if s.max_tokens is None:
        s.max_tokens = 16  # the API's documented default
    s.stop = stops(body, "stop")
    s.n = body.integer("n", minimum=1, maximum=MAX_N) or 1
    if best_of is not None and best_of != s.n:
        raise body.fail("best_of", "best_of other than n is not supported")
    top = body.integer("logprobs", minimum=0, maximum=20)
    s.logprobs = top is not None
    s.top_logprobs = top or 0
    options = body.obj("stream_options")
    conv.include_usage = bool(options and options.boolean("include_usage"))
    return conv

//! `Render`, the call before generation: an API request's body in (as the gateway received it);
//! the prompt's token ids, the sampling parameters, the decoding constraint and the output
//! session's `Open` out (docs/render.md). The `Open` goes to [`Client::open`](crate::Client::open)
//! unchanged.

use crate::options::OpenOptions;
use crate::pb;

/// A `Render` request: the model, the body's dialect and the body, plus optional fields.
///
/// ```
/// use parsetier_client::{pb, RenderOptions};
/// let body = br#"{"messages": [{"role": "user", "content": "Hi"}]}"#;
/// let render = RenderOptions::new("qwen3", pb::WireDialect::OpenaiChat, body.as_slice()).request_id("r-1");
/// assert_eq!(render.message().request_id, "r-1");
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RenderOptions {
    request: pb::RenderRequest,
}

impl RenderOptions {
    /// `body` (JSON, as received: a chat completions, completions, Responses or Messages request)
    /// in `dialect`, rendered for `model` (a name `ListModels` returns).
    pub fn new(model: impl Into<String>, dialect: pb::WireDialect, body: impl Into<Vec<u8>>) -> Self {
        RenderOptions {
            request: pb::RenderRequest {
                model: model.into(),
                dialect: dialect as i32,
                request_json: body.into(),
                ..Default::default()
            },
        }
    }

    /// The caller's request id: the `Open`'s (tool call ids derive from it) and, without
    /// [`RenderOptions::response_id`], the seed of the response id.
    pub fn request_id(mut self, id: impl Into<String>) -> Self {
        self.request.request_id = id.into();
        self
    }

    /// The id the output bodies show (`chatcmpl-…`, `msg_…`, `resp_…`).
    pub fn response_id(mut self, id: impl Into<String>) -> Self {
        self.request.response_id = id.into();
        self
    }

    /// The `created` Unix time the output bodies show.
    pub fn created(mut self, unix: i64) -> Self {
        self.request.created = unix;
        self
    }

    /// A Jinja chat template instead of the model's: refused (`PermissionDenied`) unless the
    /// server runs with `--trust-request-templates`.
    pub fn chat_template(mut self, template: impl Into<String>) -> Self {
        self.request.chat_template = template.into();
        self
    }

    /// Also return the rendered prompt text ([`Rendered::prompt_text`]), for debugging.
    pub fn return_prompt_text(mut self) -> Self {
        self.request.return_prompt_text = true;
        self
    }

    /// The `RenderRequest` these options make.
    pub fn message(&self) -> &pb::RenderRequest {
        &self.request
    }

    pub(crate) fn into_message(self) -> pb::RenderRequest {
        self.request
    }
}

/// A rendered request: what the engine generates from, and the output session's `Open`.
///
/// Give [`Rendered::prompt_token_ids`] and [`Rendered::sampling`] to the engine (and
/// [`Rendered::constraint`], when set, to its sampler), then open the output session with
/// [`Rendered::open_options`] (or [`Rendered::choice`] for choice i of `n` > 1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rendered {
    /// The prompt: the model's own chat template applied to the request, tokenized with its real
    /// tokenizer.
    pub prompt_token_ids: Vec<u32>,
    /// The output session's `Open`: model, request id, tools, tool choice, thinking, the prompt's
    /// tail, stop strings and ids, and `wire` (the request's own dialect, stream, model, response
    /// id, prompt token count). Its `output` is unset (deltas).
    pub open: pb::Open,
    /// What the engine samples with (max tokens, temperature, stop ids, `n`, ...).
    pub sampling: pb::SamplingParams,
    /// The decoding constraint when the request forces a tool or asks for a JSON format.
    pub constraint: Option<pb::BuildConstraintResponse>,
    /// The prompt's text, when [`RenderOptions::return_prompt_text`] asked for it.
    pub prompt_text: String,
}

impl Rendered {
    /// How many choices the request asked for (`n`; 1 when unset).
    pub fn n(&self) -> u32 {
        self.sampling.n.max(1)
    }

    /// The `Open` as session options, unchanged: for `Client::open`, `parse_once`,
    /// `Batch::open` or `build_constraint`.
    pub fn open_options(&self) -> OpenOptions {
        OpenOptions::from(self.open.clone())
    }

    /// The options of choice `index` (0 .. n-1): the `Open` with its `choice_index` set.
    pub fn choice(&self, index: u32) -> OpenOptions {
        self.open_options().choice(index)
    }
}

impl From<pb::RenderResponse> for Rendered {
    fn from(reply: pb::RenderResponse) -> Self {
        Rendered {
            prompt_token_ids: reply.prompt_token_ids,
            open: reply.open.unwrap_or_default(),
            sampling: reply.sampling.unwrap_or_default(),
            constraint: reply.constraint,
            prompt_text: reply.prompt_text,
        }
    }
}

//! What a session is opened with ([`OpenOptions`], the `Open` message) and how it ends
//! ([`Finish`]).

use crate::pb;

/// The parameters of one session: a builder over the `Open` message. Every method sets one
/// field; [`OpenOptions::customize`] reaches any field the helpers do not cover.
///
/// ```
/// use parsetier_client::OpenOptions;
/// let open = OpenOptions::new("qwen3").tools_json("[]").tool_choice("auto").thinking(true);
/// assert_eq!(open.message().model, "qwen3");
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpenOptions {
    open: pb::Open,
}

impl OpenOptions {
    /// A session for `model` (a name `ListModels` returns), every other field at its default.
    pub fn new(model: impl Into<String>) -> Self {
        OpenOptions { open: pb::Open { model: model.into(), ..Default::default() } }
    }

    /// The tools as the OpenAI request's `tools` array, verbatim JSON text.
    pub fn tools_json(mut self, tools: impl Into<String>) -> Self {
        self.open.tools_json = tools.into();
        self
    }

    /// The tools as messages.
    pub fn tools(mut self, tools: Vec<pb::Tool>) -> Self {
        self.open.tools = tools;
        self
    }

    /// OpenAI's `tool_choice`: `"auto"`, `"none"`, `"required"`, or the name of the one function
    /// the model must call.
    pub fn tool_choice(mut self, choice: &str) -> Self {
        use pb::tool_choice::Choice;
        let mode = match choice {
            "auto" => Some(pb::ToolChoiceMode::Auto),
            "none" => Some(pb::ToolChoiceMode::None),
            "required" => Some(pb::ToolChoiceMode::Required),
            _ => None,
        };
        let choice = match mode {
            Some(mode) => Choice::Mode(mode as i32),
            None => Choice::FunctionName(choice.to_owned()),
        };
        self.open.tool_choice = Some(pb::ToolChoice { choice: Some(choice) });
        self
    }

    /// Whether the model may make several tool calls in one response (unset: true).
    pub fn parallel_tool_calls(mut self, on: bool) -> Self {
        self.open.parallel_tool_calls = Some(on);
        self
    }

    /// Whether reasoning text is delivered (unset: true).
    pub fn include_reasoning(mut self, on: bool) -> Self {
        self.open.include_reasoning = Some(on);
        self
    }

    /// The chat template's thinking switch the prompt was rendered with.
    pub fn thinking(mut self, on: bool) -> Self {
        self.open.thinking = Some(on);
        self
    }

    /// The prompt's token ids (its tail is enough): they say whether it opened reasoning.
    pub fn prompt_token_ids(mut self, ids: Vec<u32>) -> Self {
        self.open.prompt_token_ids = ids;
        self
    }

    /// The caller's request id: in the server's logs, and the seed of tool call ids.
    pub fn request_id(mut self, id: impl Into<String>) -> Self {
        self.open.request_id = id.into();
        self
    }

    /// What the server sends while the session runs (deltas by default).
    pub fn output(mut self, kind: pb::OutputKind) -> Self {
        self.open.output = kind as i32;
        self
    }

    /// Each tool call as one delta once complete and validated, instead of streamed fragments.
    pub fn complete_tool_calls(mut self) -> Self {
        self.open.complete_tool_calls = true;
        self
    }

    /// Keep the matched stop token's or string's text in the content.
    pub fn include_stop_text(mut self) -> Self {
        self.open.include_stop_text = true;
        self
    }

    /// Put each step's ids on the delta it produced (`Delta.token_ids`), as vLLM's
    /// `return_token_ids`.
    pub fn return_token_ids(mut self) -> Self {
        self.open.return_token_ids = true;
        self
    }

    /// A completion session (`/v1/completions`): plain text, no format; `skip_special_tokens`
    /// is vLLM's sampling parameter (true is its default).
    pub fn completion(mut self, skip_special_tokens: bool) -> Self {
        self.open.completion =
            Some(pb::CompletionOptions { skip_special_tokens: Some(skip_special_tokens), ..Default::default() });
        self
    }

    /// The request's stop strings and stop token ids (besides the model's EOS), so a completion
    /// session holds back text that may become one and drops it at `Finish`.
    pub fn stop(mut self, strings: Vec<String>, token_ids: Vec<u32>) -> Self {
        self.open.stop = strings;
        self.open.stop_token_ids = token_ids;
        self
    }

    /// Which choice of a request with `n` > 1 this session is (same request id, 0 .. n-1).
    pub fn choice(mut self, index: u32) -> Self {
        self.open.choice_index = index;
        self
    }

    /// Bytes to forward as they are, in an API's wire shape (OpenAI chat / completions,
    /// Anthropic Messages, OpenAI Responses): each reply's `wire`, then `Final.wire`.
    pub fn wire(mut self, wire: pb::WireOptions) -> Self {
        self.open.wire = Some(wire);
        self
    }

    /// Sets any field of the `Open` message directly.
    pub fn customize(mut self, f: impl FnOnce(&mut pb::Open)) -> Self {
        f(&mut self.open);
        self
    }

    /// The `Open` message these options make.
    pub fn message(&self) -> &pb::Open {
        &self.open
    }

    pub(crate) fn into_message(self) -> pb::Open {
        self.open
    }
}

impl From<pb::Open> for OpenOptions {
    /// A whole `Open`, such as `Render`'s ([`Rendered::open`](crate::Rendered::open)), as it is.
    fn from(open: pb::Open) -> Self {
        OpenOptions { open }
    }
}

/// How an output ended: a reason (stop, length, abort) and what stopped it. `Finish::default()`
/// is a stop with nothing matched, the server's default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Finish {
    finish: pb::Finish,
}

impl Finish {
    /// Generation stopped (the end of the message), nothing named.
    pub fn stop() -> Self {
        Finish::default()
    }

    /// Generation stopped on the stop token `id` (e.g. Qwen3's `<|im_end|>`, 151645), sent in
    /// the last step or not.
    pub fn stop_token(id: u32) -> Self {
        Finish::with(pb::FinishReason::Stop, Some(pb::finish::MatchedStop::StopTokenId(id)))
    }

    /// Generation stopped because the stop string `text` matched.
    pub fn stop_string(text: impl Into<String>) -> Self {
        Finish::with(pb::FinishReason::Stop, Some(pb::finish::MatchedStop::StopString(text.into())))
    }

    /// The token limit was reached.
    pub fn length() -> Self {
        Finish::with(pb::FinishReason::Length, None)
    }

    /// The caller stopped generation.
    pub fn abort() -> Self {
        Finish::with(pb::FinishReason::Abort, None)
    }

    fn with(reason: pb::FinishReason, matched: Option<pb::finish::MatchedStop>) -> Self {
        Finish { finish: pb::Finish { reason: reason as i32, matched_stop: matched, other_choices_usage: None } }
    }

    /// For the last of a request's `n > 1` choices to finish: the other choices' summed usage, so
    /// the usage this session's wire bytes show counts every choice, as the APIs report it.
    pub fn with_other_choices_usage(mut self, completion_tokens: u32, reasoning_tokens: u32) -> Self {
        self.finish.other_choices_usage = Some(pb::Usage { completion_tokens, reasoning_tokens });
        self
    }

    /// The `Finish` message.
    pub fn message(&self) -> &pb::Finish {
        &self.finish
    }

    pub(crate) fn into_message(self) -> pb::Finish {
        self.finish
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_choice_carries_the_other_choices_usage() {
        let finish = Finish::length().with_other_choices_usage(7, 3).into_message();
        assert_eq!(finish.reason, pb::FinishReason::Length as i32);
        assert_eq!(finish.other_choices_usage, Some(pb::Usage { completion_tokens: 7, reasoning_tokens: 3 }));
        assert_eq!(Finish::stop().message().other_choices_usage, None);
    }
}

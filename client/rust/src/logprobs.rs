//! Logprob helpers: building an id step that carries its logprobs, and mapping the resolved
//! logprobs the server returns onto OpenAI's chat and completions shapes.

use std::collections::BTreeMap;

use crate::pb;

/// One top-k entry the generate side reports at a position: an id and its logprob.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Alternative {
    pub token_id: u32,
    pub logprob: f32,
}

/// An id step carrying its logprobs: one logprob per id, and per id the same number of
/// alternatives (`top[i]` for `token_ids[i]`, best first; empty for none). The server resolves
/// every id to its text and bytes and puts them on the delta the step produced
/// (`Delta.logprobs`). Send it with `Session::send_steps` or `Batch::feed_steps`.
pub fn logprob_step(token_ids: Vec<u32>, logprobs: Vec<f32>, top: &[Vec<Alternative>]) -> pb::Step {
    let mut resolved = pb::StepLogprobs { token_logprobs: logprobs, ..Default::default() };
    for alternative in top.iter().flatten() {
        resolved.top_token_ids.push(alternative.token_id);
        resolved.top_logprobs.push(alternative.logprob);
    }
    pb::Step { token_ids, logprobs: Some(resolved), ..Default::default() }
}

/// The resolved logprobs of `deltas`, in order (a session's, or one chunk's).
pub fn logprobs<'a>(deltas: impl IntoIterator<Item = &'a pb::Delta>) -> Vec<pb::TokenLogprob> {
    deltas.into_iter().flat_map(|d| d.logprobs.iter().cloned()).collect()
}

/// One entry of OpenAI chat's `top_logprobs`.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatTopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// One entry of OpenAI chat's `logprobs.content`.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<ChatTopLogprob>,
}

/// OpenAI chat's `choices[].logprobs` object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatLogprobs {
    pub content: Vec<ChatLogprob>,
}

/// OpenAI completions' `choices[].logprobs` object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    /// Each position's alternatives, `{token: logprob}` (a token text that repeats keeps its
    /// last logprob, as a JSON object would).
    pub top_logprobs: Vec<BTreeMap<String, f32>>,
    pub text_offset: Vec<usize>,
}

/// Resolved logprobs mapped 1:1 onto OpenAI chat's shape.
pub fn to_chat(logprobs: &[pb::TokenLogprob]) -> ChatLogprobs {
    let content = logprobs
        .iter()
        .map(|lp| ChatLogprob {
            token: lp.token.clone(),
            logprob: lp.logprob,
            bytes: lp.bytes.clone(),
            top_logprobs: lp
                .top_logprobs
                .iter()
                .map(|t| ChatTopLogprob { token: t.token.clone(), logprob: t.logprob, bytes: t.bytes.clone() })
                .collect(),
        })
        .collect();
    ChatLogprobs { content }
}

/// Resolved logprobs mapped 1:1 onto OpenAI completions' shape. `text_offset` is added to every
/// offset (the echoed prompt's length in code points when echoing, else 0); offsets count
/// Unicode code points, as OpenAI's API.
pub fn to_completion(logprobs: &[pb::TokenLogprob], text_offset: usize) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for lp in logprobs {
        out.tokens.push(lp.token.clone());
        out.token_logprobs.push(lp.logprob);
        out.top_logprobs.push(lp.top_logprobs.iter().map(|t| (t.token.clone(), t.logprob)).collect());
        out.text_offset.push(text_offset + lp.text_offset as usize);
    }
    out
}

/// The byte index in `text` of a code-point offset (`TokenLogprob.text_offset`), for slicing a
/// `str` at a token; `None` past the end.
pub fn rune_offset(text: &str, code_points: usize) -> Option<usize> {
    text.char_indices().map(|(i, _)| i).chain(std::iter::once(text.len())).nth(code_points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rune_offsets_count_code_points() {
        let text = "aé😀b";
        assert_eq!(rune_offset(text, 0), Some(0));
        assert_eq!(rune_offset(text, 2), Some(3));
        assert_eq!(rune_offset(text, 3), Some(7));
        assert_eq!(rune_offset(text, 4), Some(text.len()));
        assert_eq!(rune_offset(text, 5), None);
    }

    #[test]
    fn logprob_step_flattens_alternatives_id_major() {
        let top = vec![
            vec![Alternative { token_id: 1, logprob: -0.1 }, Alternative { token_id: 2, logprob: -2.0 }],
            vec![Alternative { token_id: 3, logprob: -0.2 }, Alternative { token_id: 4, logprob: -3.0 }],
        ];
        let step = logprob_step(vec![1, 3], vec![-0.1, -0.2], &top);
        let lp = step.logprobs.expect("logprobs");
        assert_eq!(lp.top_token_ids, vec![1, 2, 3, 4]);
        assert_eq!(lp.top_logprobs, vec![-0.1, -2.0, -0.2, -3.0]);
    }
}

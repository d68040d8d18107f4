//! Logprob helpers: building an id step that carries its logprobs, and gathering the resolved
//! logprobs the server returns (the proto's `TokenLogprob`s). OpenAI's JSON shapes of them are the
//! server's to write: open the session with `OpenOptions::wire` (OpenAI chat or completions) and
//! forward its wire bytes, which carry them.

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

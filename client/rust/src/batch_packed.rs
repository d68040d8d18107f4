//! The packed form of a `ParseBatch` message, at the wire boundary only. Most entries of an
//! engine step are one step of token ids for an open session; `ParseBatchRequest.packed` carries
//! them as parallel arrays, and the server answers their plain text deltas in
//! `ParseBatchResponse.packed`. [`crate::Batch`] works in `SessionInput` form: [`wire_request`]
//! packs what goes out, and [`unpack_outputs`] / [`in_entry_order`] turn replies back into
//! `SessionOutput`s in the order of the step's entries before anything else reads them.

use crate::error::{Error, Result};
use crate::pb;

/// Whether `entry` is exactly one step of token ids for an open session (what a packed item
/// stands for: no open, finish, cancel, text or logprobs).
pub(crate) fn packable(entry: &pb::SessionInput) -> bool {
    entry.open.is_none()
        && entry.finish.is_none()
        && !entry.cancel
        && entry.steps.len() == 1
        && entry.steps[0].text.is_empty()
        && entry.steps[0].text_tokens == 0
        && entry.steps[0].logprobs.is_none()
}

/// The message that carries `entries`: the packable ones as packed items (the server applies
/// them after the others), the rest as they are. `token_counts` is left out when every item
/// has one id, the usual engine step.
pub(crate) fn wire_request(entries: Vec<pb::SessionInput>) -> pb::ParseBatchRequest {
    let (mut items, mut ids, mut ones) = (0, 0, true);
    for entry in entries.iter().filter(|e| packable(e)) {
        let n = entry.steps[0].token_ids.len();
        items += 1;
        ids += n;
        ones &= n == 1;
    }
    if items == 0 {
        return pb::ParseBatchRequest { sessions: entries, packed: None };
    }
    let mut packed = pb::PackedSteps {
        keys: Vec::with_capacity(items),
        token_counts: Vec::with_capacity(if ones { 0 } else { items }),
        token_ids: Vec::with_capacity(ids),
    };
    let mut sessions = Vec::with_capacity(entries.len() - items);
    for mut entry in entries {
        if !packable(&entry) {
            sessions.push(entry);
            continue;
        }
        let step = entry.steps.pop().map(|s| s.token_ids).unwrap_or_default();
        if !ones {
            packed.token_counts.push(step.len() as u32);
        }
        packed.keys.push(entry.key);
        packed.token_ids.extend_from_slice(&step);
    }
    pb::ParseBatchRequest { sessions, packed: Some(packed) }
}

/// `reply.packed` as the `SessionOutput`s it stands for, in its order.
pub(crate) fn unpack_outputs(packed: Option<pb::PackedOutputs>) -> Result<Vec<pb::SessionOutput>> {
    let Some(mut packed) = packed else { return Ok(Vec::new()) };
    let n = packed.keys.len();
    // The digests are parallel to the keys (a server without them sends none).
    let digests = Some(std::mem::take(&mut packed.output_digests)).filter(|d| !d.is_empty());
    if packed.sequences.len() != n
        || packed.client_messages.len() != n
        || packed.texts.len() != n
        || packed.reasoning.len() != n
        || digests.as_ref().is_some_and(|d| d.len() != n)
    {
        return Err(Error::protocol(format!(
            "a packed reply's arrays differ in length ({n} keys, {} sequences, {} client_messages, {} texts, {} reasoning)",
            packed.sequences.len(),
            packed.client_messages.len(),
            packed.texts.len(),
            packed.reasoning.len()
        )));
    }
    let mut outs = Vec::with_capacity(n);
    let texts = packed.texts.into_iter();
    for (i, (key, text)) in packed.keys.into_iter().zip(texts).enumerate() {
        let delta = if packed.reasoning[i] {
            pb::Delta { reasoning: text, ..Default::default() }
        } else {
            pb::Delta { content: text, ..Default::default() }
        };
        let mut out = pb::SessionOutput {
            key,
            sequence: packed.sequences[i],
            client_messages: packed.client_messages[i],
            deltas: vec![delta],
            ..Default::default()
        };
        set_digest(&mut out, digests.as_deref(), i);
        outs.push(out);
    }
    Ok(outs)
}

fn set_digest(out: &mut pb::SessionOutput, digests: Option<&[u32]>, i: usize) {
    if let Some(digest) = digests.and_then(|d| d.get(i)) {
        out.output_digest = *digest;
    }
}

/// What the ordering needs of a sent entry: its key and whether it went packed.
pub(crate) type SentEntry = (String, bool);

/// A reply's outputs in the order of the entries it answers, as a message of `SessionInput`s
/// alone would have had them. By the protocol the reply lists first the outputs of the entries
/// sent as they are, in their order, then those of packed items that are more than one text
/// delta, in the items' order; `packed` holds the rest, in the items' order.
pub(crate) fn in_entry_order(
    entries: &[SentEntry],
    sessions: Vec<pb::SessionOutput>,
    packed: Vec<pb::SessionOutput>,
) -> Result<Vec<pb::SessionOutput>> {
    let any_packed = entries.iter().any(|(_, p)| *p);
    if !any_packed && packed.is_empty() {
        return Ok(sessions);
    }
    let mut split = 0; // where the packed items' outputs begin in sessions
    for (key, is_packed) in entries {
        if !is_packed && split < sessions.len() && &sessions[split].key == key {
            split += 1;
        }
    }
    let total = sessions.len() + packed.len();
    let mut sessions: Vec<Option<pb::SessionOutput>> = sessions.into_iter().map(Some).collect();
    let mut packed: Vec<Option<pb::SessionOutput>> = packed.into_iter().map(Some).collect();
    let key_at = |v: &[Option<pb::SessionOutput>], i: usize| v.get(i).and_then(|o| o.as_ref()).map(|o| o.key.clone());
    let mut outs = Vec::with_capacity(total);
    let (mut plain, mut rest, mut text) = (0, split, 0);
    for (key, is_packed) in entries {
        if !is_packed {
            if plain < split && key_at(&sessions, plain).as_ref() == Some(key) {
                outs.extend(sessions[plain].take());
                plain += 1;
            }
        } else if key_at(&sessions, rest).as_ref() == Some(key) {
            outs.extend(sessions[rest].take());
            rest += 1;
        } else if key_at(&packed, text).as_ref() == Some(key) {
            outs.extend(packed[text].take());
            text += 1;
        }
    }
    if outs.len() != total {
        return Err(Error::protocol(format!(
            "a ParseBatch reply's outputs are not in the order of the message's entries ({} of {total} placed)",
            outs.len()
        )));
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(key: &str, ids: &[u32]) -> pb::SessionInput {
        let step = pb::Step { token_ids: ids.to_vec(), ..Default::default() };
        pb::SessionInput { key: key.into(), steps: vec![step], ..Default::default() }
    }

    #[test]
    fn packs_the_usual_entries_and_leaves_the_rest() {
        let open = pb::SessionInput { key: "o".into(), open: Some(pb::Open::default()), ..Default::default() };
        let msg = wire_request(vec![feed("a", &[1]), open, feed("b", &[2, 3])]);
        assert_eq!(msg.sessions.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(), ["o"]);
        let packed = msg.packed.expect("packed");
        assert_eq!(
            (packed.keys, packed.token_counts, packed.token_ids),
            (vec!["a".into(), "b".into()], vec![1, 2], vec![1, 2, 3])
        );
        let ones = wire_request(vec![feed("a", &[1]), feed("b", &[2])]).packed.expect("packed");
        assert!(ones.token_counts.is_empty(), "one id each: no counts");
    }

    /// Packed arrays of different lengths, or outputs out of the entries' order, are errors
    /// (never a panic) whatever the server sends.
    #[test]
    fn malformed_replies_are_errors() {
        let packed = pb::PackedOutputs {
            keys: vec!["a".into(), "b".into()],
            sequences: vec![1],
            client_messages: vec![1, 1],
            texts: vec!["x".into(), "y".into()],
            reasoning: vec![false, false],
            output_digests: vec![],
        };
        assert_eq!(unpack_outputs(Some(packed)).expect_err("short sequences").code(), tonic::Code::Internal);
        let out = |key: &str| pb::SessionOutput { key: key.into(), ..Default::default() };
        let entries = vec![("a".to_string(), true), ("b".to_string(), false)];
        assert!(in_entry_order(&entries, vec![out("b"), out("zzz")], vec![out("a")]).is_err());
        let ordered = in_entry_order(&entries, vec![out("b")], vec![out("a")]).expect("in order");
        assert_eq!(ordered.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    }
}

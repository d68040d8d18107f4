//! The `n` > 1 choices of one OpenAI chat or completions request are `n` sessions whose wire
//! bytes make one response: [`WireJoin`] orders and joins them (docs/service.md, "Several
//! choices"), so that no gateway writes it by hand.

use std::ops::Range;

use crate::{Error, Result, WireReply};

/// The wire bytes of `n` sessions, the choices `0 .. n-1` of one OpenAI chat or completions
/// request (choice `i` opened with [`crate::OpenOptions::choice`] `i`), joined into the one
/// response its caller reads; with `n` = 1, any dialect's bytes pass through unchanged, so one
/// code path serves every request. Feed each session's replies as they come ([`WireJoin::add`]:
/// a `Parse` reply or a batch output) and forward what it returns.
///
/// Streamed: a choice's events are held until every choice before it has sent its first (the
/// openai SDK's accumulator appends a choice index it has not seen, so an index that comes early
/// breaks it); every choice's `Final.wire` is held and only the last to finish has its own go
/// out, once all have finished (send that choice's finish with
/// [`crate::Finish::with_other_choices_usage`], the others' usage summed, and its usage chunk
/// counts every choice). A body (`stream` false): each choice's `Final.wire` is a whole body;
/// once all have one, the joined body is the last one's with every choice's `choices` entries in
/// index order (its usage is the request's, with `other_choices_usage`). A choice that ends with
/// a status ends the response: its error bytes go out at once, held events are dropped, and
/// nothing more comes (cancel the other choices' sessions).
///
/// ```
/// use parsetier_client::{pb, WireJoin};
/// let body = |index: u32| pb::ParseResponse {
///     r#final: Some(pb::Final {
///         wire: format!(r#"{{"id":"c","choices":[{{"index":{index},"text":"]\""}}],"usage":{{}}}}"#).into_bytes(),
///         ..Default::default()
///     }),
///     ..Default::default()
/// };
/// let mut join = WireJoin::new(2, false);
/// assert!(join.add(1, &body(1)).unwrap().is_empty());
/// let joined = join.add(0, &body(0)).unwrap();
/// assert_eq!(
///     String::from_utf8(joined).unwrap(),
///     r#"{"id":"c","choices":[{"index":0,"text":"]\""},{"index":1,"text":"]\""}],"usage":{}}"#
/// );
/// assert!(join.ended());
/// ```
#[derive(Debug)]
pub struct WireJoin {
    stream: bool,
    /// Choices `0 .. started` have sent their first events (theirs go out as they come).
    started: usize,
    held: Vec<Vec<u8>>,
    finals: Vec<Option<Vec<u8>>>,
    finished: usize,
    /// The choice that finished last.
    last: usize,
    ended: bool,
}

impl WireJoin {
    /// Joins `n` choices (at least one), streamed or as bodies.
    ///
    /// # Panics
    /// If `n` is 0.
    pub fn new(n: usize, stream: bool) -> Self {
        assert!(n > 0, "parsetier: a WireJoin needs at least one choice");
        WireJoin {
            stream,
            started: 0,
            held: vec![Vec::new(); n],
            finals: vec![None; n],
            finished: 0,
            last: 0,
            ended: false,
        }
    }

    /// The response is complete (every choice finished) or failed: nothing more comes.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The bytes to forward now for `reply`, one of choice `choice`'s (a `Parse` stream's
    /// [`crate::pb::ParseResponse`] or a batch session's [`crate::pb::SessionOutput`]). A choice
    /// out of range, one that finishes twice, or a body that is not a JSON object with a
    /// `choices` array is [`Error::Protocol`].
    pub fn add(&mut self, choice: usize, reply: &impl WireReply) -> Result<Vec<u8>> {
        let n = self.finals.len();
        if choice >= n {
            return Err(Error::protocol(format!("choice {choice} is not in 0..{}", n - 1)));
        }
        if self.ended {
            return Ok(Vec::new());
        }
        self.held[choice].extend_from_slice(reply.own_wire());
        if let Some(last) = reply.final_result() {
            if self.finals[choice].replace(last.wire.clone()).is_some() {
                return Err(Error::protocol(format!("choice {choice} finished twice")));
            }
            self.finished += 1;
            self.last = choice;
        }
        let mut out = if self.stream { self.release() } else { Vec::new() };
        let failed = reply.status_wire();
        if !failed.is_empty() {
            self.ended = true;
            out.extend_from_slice(failed);
            return Ok(out);
        }
        if self.finished == n {
            self.ended = true;
            if self.stream {
                out.extend_from_slice(self.finals[self.last].as_deref().unwrap_or_default());
            } else {
                out.extend(self.joined_body()?);
            }
        }
        Ok(out)
    }

    /// A choice's `Parse` stream failed with `error`: the bytes that end the response (the error
    /// in the dialect, [`Error::wire`]; none if the server sent none), then nothing more.
    pub fn fail(&mut self, error: &Error) -> Vec<u8> {
        if self.ended {
            return Vec::new();
        }
        self.ended = true;
        error.wire().unwrap_or_default()
    }

    /// The held events that may go out: those of every choice whose predecessors started.
    fn release(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        while self.started < self.held.len() && !self.held[self.started].is_empty() {
            out.append(&mut self.held[self.started]);
            self.started += 1;
        }
        for held in &mut self.held[..self.started] {
            out.append(held);
        }
        out
    }

    /// The last body with every body's `choices` entries, in index order, as its `choices`: the
    /// server's bytes are kept as they are, only the array is rebuilt.
    fn joined_body(&self) -> Result<Vec<u8>> {
        let bodies: Vec<&[u8]> = self.finals.iter().map(|body| body.as_deref().unwrap_or_default()).collect();
        if bodies.len() == 1 {
            return Ok(bodies[0].to_vec()); // one choice's body is the response's, in any dialect
        }
        let mut entries = Vec::new();
        for (choice, body) in bodies.iter().enumerate() {
            let bad = || Error::protocol(format!("choice {choice}'s body has no choices array"));
            let array = json::member(body, b"choices").ok_or_else(bad)?;
            for entry in json::elements(body, array).ok_or_else(bad)? {
                let index = json::member(&body[entry.clone()], b"index")
                    .and_then(|at| std::str::from_utf8(&body[entry.start + at.start..entry.start + at.end]).ok())
                    .and_then(|text| text.parse::<u64>().ok())
                    .ok_or_else(|| Error::protocol(format!("choice {choice}'s choices entry has no index")))?;
                entries.push((index, &body[entry]));
            }
        }
        entries.sort_by_key(|(index, _)| *index); // stable: a choice's own entries keep their order
        let last = bodies[self.last];
        let array = json::member(last, b"choices").expect("checked above");
        let mut out = Vec::with_capacity(bodies.iter().map(|b| b.len()).sum());
        out.extend_from_slice(&last[..array.start]);
        out.push(b'[');
        for (i, (_, entry)) in entries.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(entry);
        }
        out.push(b']');
        out.extend_from_slice(&last[array.end..]);
        Ok(out)
    }
}

/// Just enough JSON to find values in the server's bodies without reading them: spans of a
/// top-level member and of an array's elements (strings skipped with their escapes).
mod json {
    use super::Range;

    fn space(text: &[u8], mut at: usize) -> usize {
        while at < text.len() && text[at].is_ascii_whitespace() {
            at += 1;
        }
        at
    }

    /// The end of the value that starts at `at` (a string, object, array or scalar).
    fn value_end(text: &[u8], at: usize) -> Option<usize> {
        let mut depth = 0usize;
        let mut i = at;
        while i < text.len() {
            match text[i] {
                b'"' => {
                    i += 1;
                    while *text.get(i)? != b'"' {
                        i += if text[i] == b'\\' { 2 } else { 1 };
                    }
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' if depth > 0 => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                b',' | b'}' | b']' if depth == 0 => return (i > at).then_some(i),
                c if depth == 0 && c.is_ascii_whitespace() => return (i > at).then_some(i),
                _ => {}
            }
            i += 1;
        }
        (depth == 0 && i > at).then_some(i)
    }

    /// The span of the value of `key` in the object `text`, at its top level.
    pub(super) fn member(text: &[u8], key: &[u8]) -> Option<Range<usize>> {
        let mut at = space(text, 0);
        if text.get(at) != Some(&b'{') {
            return None;
        }
        at = space(text, at + 1);
        while text.get(at) == Some(&b'"') {
            let name_end = value_end(text, at)?;
            let name = &text[at + 1..name_end - 1];
            at = space(text, name_end);
            if text.get(at) != Some(&b':') {
                return None;
            }
            let start = space(text, at + 1);
            let end = value_end(text, start)?;
            if name == key {
                return Some(start..end);
            }
            at = space(text, end);
            match text.get(at) {
                Some(b',') => at = space(text, at + 1),
                _ => return None,
            }
        }
        None
    }

    /// The spans of the elements of the array at `array` in `text`.
    pub(super) fn elements(text: &[u8], array: Range<usize>) -> Option<Vec<Range<usize>>> {
        if text.get(array.start) != Some(&b'[') {
            return None;
        }
        let mut out = Vec::new();
        let mut at = space(text, array.start + 1);
        while at < array.end - 1 {
            let end = value_end(text, at)?;
            out.push(at..end);
            at = space(text, end);
            if text.get(at) == Some(&b',') {
                at = space(text, at + 1);
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb;

    fn reply(wire: &str, last: Option<&str>) -> pb::ParseResponse {
        pb::ParseResponse {
            wire: wire.as_bytes().to_vec(),
            r#final: last.map(|w| pb::Final { wire: w.as_bytes().to_vec(), ..Default::default() }),
            ..Default::default()
        }
    }

    /// One choice's bytes pass through unchanged, whatever the dialect: a gateway joins every
    /// request's sessions with one `WireJoin`, `n` = 1 included.
    #[test]
    fn one_choice_passes_through() {
        let body = r#"{"id":"msg_1","type":"message","content":[{"type":"text","text":"<&>"}]}"#;
        let mut join = WireJoin::new(1, false);
        assert_eq!(join.add(0, &reply("", Some(body))).unwrap(), body.as_bytes());
        assert!(join.ended());
        let mut events = WireJoin::new(1, true);
        let first = events.add(0, &reply("event: a\n\n", None)).unwrap();
        let last = events.add(0, &reply("event: b\n\n", Some("event: c\n\n"))).unwrap();
        assert_eq!([first, last].concat(), b"event: a\n\nevent: b\n\nevent: c\n\n");
        assert!(events.ended());
    }

    /// Streamed: choice 1's events wait for choice 0's first; only the last final goes out.
    #[test]
    fn streamed_choices_start_in_index_order() {
        let mut join = WireJoin::new(2, true);
        assert!(join.add(1, &reply("one-a ", None)).unwrap().is_empty());
        assert_eq!(join.add(0, &reply("zero-a ", None)).unwrap(), b"zero-a one-a ");
        assert_eq!(join.add(1, &reply("one-b ", Some("one-end "))).unwrap(), b"one-b ");
        assert_eq!(join.add(0, &reply("zero-b ", Some("zero-end "))).unwrap(), b"zero-b zero-end ");
        assert!(join.ended());
        assert!(join.add(0, &reply("late", None)).unwrap().is_empty());
    }

    /// A batch output that ended its session with a status ends the response with its bytes.
    #[test]
    fn a_failed_choice_ends_the_response() {
        let mut join = WireJoin::new(2, true);
        assert!(join.add(1, &reply("held ", None)).unwrap().is_empty());
        let failed = pb::SessionOutput {
            status: Some(pb::SessionStatus { wire: b"error".to_vec(), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(join.add(0, &failed).unwrap(), b"error");
        assert!(join.ended() && join.add(1, &reply("more", None)).unwrap().is_empty());
        assert_eq!(join.add(2, &failed).unwrap_err().code(), crate::Code::Internal);
    }

    /// Bodies: entries sorted by their index (whatever the feeding order), strings with brackets,
    /// quotes and escapes kept byte for byte, the last body's other members kept.
    #[test]
    fn bodies_join_in_index_order() {
        let body = |index: u32, usage: u32| {
            format!(
                r#"{{ "id" : "c", "choices" : [ {{"text":"a\"]}}[\\", "index" : {index}, "x":[1,{{"y":null}}]}} ], "usage":{{"n":{usage}}}}}"#
            )
        };
        let mut join = WireJoin::new(3, false);
        for (choice, usage) in [(2, 7), (0, 5)] {
            assert!(join.add(choice, &reply("", Some(&body(choice as u32, usage)))).unwrap().is_empty());
        }
        let joined = String::from_utf8(join.add(1, &reply("", Some(&body(1, 9)))).unwrap()).unwrap();
        let entry = |i: u32| format!(r#"{{"text":"a\"]}}[\\", "index" : {i}, "x":[1,{{"y":null}}]}}"#);
        let want =
            format!(r#"{{ "id" : "c", "choices" : [{},{},{}], "usage":{{"n":9}}}}"#, entry(0), entry(1), entry(2));
        assert_eq!(joined, want);
        let mut broken = WireJoin::new(2, false);
        broken.add(0, &reply("", Some(r#"{"choices":[{"index":0}]}"#))).unwrap();
        assert_eq!(broken.add(1, &reply("", Some(r#"{"id":"c"}"#))).unwrap_err().code(), crate::Code::Internal);
    }
}

//! `_core.PackedSteps`: a `ParseBatch` message's packed items stepped natively, many per call,
//! with no Python per item (`BatchProtocol._apply_packed`); `_core.SessionTable`: the stream's
//! open sessions as the core finds them, key bytes → ledger, so an item is looked up with no
//! Python object (no key `str`, no dict lookup, no attribute read).
//!
//! An item is stepped here when the table holds its key: the session's ledger steps it
//! (`ledger::step`, the one plain step, shared with the `Parse` stream's `step_reply`), which
//! declines what Python applies by its own rules (an unbound ledger, a bad id, a limit). Which
//! messages are plain, and which sessions the core may step, is Python's decision
//! (`parsetier.protocol.rules`). Everything else the item needs (counting, the digest, the
//! reply's sequence) is the ledger's, and its reply is written as protobuf bytes: a packed output (`PackedOutputs`) when it is one plain text delta,
//! else a `SessionOutput` (tool-call deltas, events). `step` stops at the first item it leaves to
//! Python, having done nothing for it; Python merges the bytes (`MergeFromString`: outputs keep
//! the items' order), applies that item by its own rules, and calls `step` again after it.

use std::collections::{HashMap, HashSet};

use parsetier_engine::events::{DeltaKind, StepOut};
use parsetier_engine::keyhash::KeyState;
use parsetier_engine::prefetch::lines as prefetch;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};
use pyo3::Py;

use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};

use crate::ledger::{self, Ledger, Stepped, Taken};
use crate::reply::{self, SESSION_OUTPUT};
use crate::session::PySession;

/// A `ParseBatch` stream's open sessions as the packed path finds them: each key's bytes → its
/// session's ledger (`_core.Ledger`). `BatchProtocol` keeps it beside its dict of protocols,
/// adding a key when it opens a session and removing it when the session leaves the stream. It
/// says which sessions exist, not which may be stepped: that is the ledger's binding
/// (`Ledger.bind` / `unbind`, which `SessionProtocol` decides), read at each item.
#[pyclass(name = "SessionTable", module = "parsetier._core")]
#[derive(Default)]
pub struct SessionTable {
    /// Keyed by a cheap seeded hash, not std's SipHash: every packed item looks its key up.
    ledgers: HashMap<TableKey, Py<Ledger>, KeyState>,
}

impl SessionTable {
    /// The ledger held for `key`: a short key is looked up as a `TableKey` (on the stack), so
    /// the table compares it with its entries' inline arrays (`TableKey::eq`).
    fn find(&self, key: &[u8]) -> Option<&Py<Ledger>> {
        if key.len() <= INLINE_KEY {
            self.ledgers.get(&TableKey::new(key))
        } else {
            self.ledgers.get(key)
        }
    }
}

#[pymethods]
impl SessionTable {
    #[new]
    fn new() -> Self {
        SessionTable::default()
    }

    /// `key`'s session keeps `ledger`. A ledger that is not native (the reference engine's
    /// `PyLedger`) is not held: that key's items are Python's, as when the key is unknown.
    fn add(&mut self, key: &Bound<'_, PyString>, ledger: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = key.to_str()?.as_bytes();
        match ledger.cast::<Ledger>() {
            Ok(ledger) => {
                self.ledgers
                    .insert(TableKey::new(key), ledger.clone().unbind());
            }
            Err(_) => {
                self.ledgers.remove(key);
            }
        }
        Ok(())
    }

    /// `key`'s session left the stream (nothing when the table does not hold it).
    fn remove(&mut self, key: &Bound<'_, PyString>) -> PyResult<()> {
        self.ledgers.remove(key.to_str()?.as_bytes());
        Ok(())
    }

    /// Every session left the stream.
    fn clear(&mut self) {
        self.ledgers.clear();
    }

    /// The ledger held for `key`, or None.
    fn get(&self, py: Python<'_>, key: &Bound<'_, PyString>) -> PyResult<Option<Py<Ledger>>> {
        let key = key.to_str()?.as_bytes();
        Ok(self.find(key).map(|l| l.clone_ref(py)))
    }

    /// The keys held (in no order).
    fn keys(&self) -> Vec<String> {
        self.ledgers
            .keys()
            .map(|k| String::from_utf8_lossy(k.bytes()).into_owned())
            .collect()
    }

    fn __len__(&self) -> usize {
        self.ledgers.len()
    }
}

/// Keys up to this many bytes are held in the table's own entries (the usual keys: a session's
/// number, a request id): a lookup compares them where it found the entry, with no pointer to
/// a key of its own to follow (a cache miss per item with a thousand sessions).
const INLINE_KEY: usize = 30;

/// A key as `SessionTable` holds it; hashed and compared as its bytes, so `[u8]` finds it.
enum TableKey {
    Inline(u8, [u8; INLINE_KEY]),
    Boxed(Box<[u8]>),
}

impl TableKey {
    fn new(key: &[u8]) -> TableKey {
        if key.len() <= INLINE_KEY {
            let mut bytes = [0u8; INLINE_KEY];
            bytes[..key.len()].copy_from_slice(key);
            TableKey::Inline(key.len() as u8, bytes)
        } else {
            TableKey::Boxed(key.into())
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            TableKey::Inline(n, bytes) => &bytes[..usize::from(*n)],
            TableKey::Boxed(bytes) => bytes,
        }
    }
}

impl std::borrow::Borrow<[u8]> for TableKey {
    fn borrow(&self) -> &[u8] {
        self.bytes()
    }
}

impl std::hash::Hash for TableKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes().hash(state);
    }
}

impl PartialEq for TableKey {
    /// Two inline keys compare as their whole arrays (zero past their length): a few word
    /// compares where a slice compare called `memcmp` for every lookup.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (TableKey::Inline(n, a), TableKey::Inline(m, b)) => n == m && a == b,
            _ => self.bytes() == other.bytes(),
        }
    }
}

impl Eq for TableKey {}

#[pyclass(name = "PackedSteps", module = "parsetier._core")]
pub struct PackedSteps {
    /// The items' keys, UTF-8, one after another: item `i`'s is
    /// `key_bytes[key_offsets[i]..key_offsets[i + 1]]`. Python `str`s are made only for the
    /// items Python applies (`key`, `keys`).
    key_bytes: Vec<u8>,
    key_offsets: Vec<usize>,
    ids: Vec<u32>,
    /// Item `i`'s ids are `ids[offsets[i]..offsets[i + 1]]`.
    offsets: Vec<usize>,
    /// A message's entries (`sessions`) rather than its packed items (`read_batch`'s third
    /// value): every reply is a whole `SessionOutput`, in the entries' place, and only the
    /// entries in `steps` are the core's.
    entries: Option<Entries>,
}

/// What `PackedSteps` holds of a message's entries beyond their keys and ids.
struct Entries {
    /// Entry `i`'s number of steps when it is nothing but steps of token ids (a key and `steps`
    /// whose only field is `token_ids`: a plain message of their ids concatenated, as
    /// `SessionProtocol`'s general path feeds them), else None (Python applies it).
    steps: Vec<Option<u32>>,
    /// The entries that carry an `Open` (the only ones that may need a model loaded).
    opening: Vec<usize>,
}

/// What `step` tells Python about the item it stopped at.
const TO_PYTHON: u8 = 0;
/// The item's session failed in the core (a server bug): Python ends that session with INTERNAL.
const FAILED: u8 = 1;

#[pymethods]
impl PackedSteps {
    /// `keys`: the items' keys (a list of str); `ids` and `counts` as in `PackedSteps` (the
    /// framing already checked: `counts` empty or one per key, adding up to `len(ids)`).
    #[new]
    fn new(keys: Bound<'_, PyList>, ids: Vec<u32>, counts: Vec<u32>) -> PyResult<Self> {
        let keys: Vec<String> = keys.extract()?;
        let offsets = offsets(keys.len(), &counts, ids.len()).ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err("packed: the counts do not frame the ids")
        })?;
        let (key_bytes, key_offsets) = joined(keys.iter().map(String::as_bytes));
        Ok(PackedSteps {
            key_bytes,
            key_offsets,
            ids,
            offsets,
            entries: None,
        })
    }

    /// Step items `start..stop` whose key `table` holds with a ledger bound to a native
    /// session, each held to `max_tokens` tokens (and an entry to `max_steps` steps): (the
    /// index of the first item left to Python, or `stop`; why it was left: 0 its rules are
    /// Python's, 1 its session failed in the core; the replies of the items before it, as
    /// `ParseBatchResponse` bytes to merge).
    #[pyo3(signature = (table, start, stop, max_tokens, max_steps = u64::MAX))]
    fn step<'py>(
        &self,
        py: Python<'py>,
        table: PyRef<'py, SessionTable>,
        start: usize,
        stop: usize,
        max_tokens: u64,
        max_steps: u64,
    ) -> PyResult<(usize, u8, Bound<'py, PyBytes>)> {
        let stop = stop.min(self.len());
        let mut w = Replies::for_items(stop.saturating_sub(start));
        // Every item's ledger first: the lookups are independent, so the cache misses of their
        // keys and ledgers overlap instead of coming one per item between two steps (with a
        // thousand sessions no session's state stays in cache from one message to the next).
        let ledgers: Vec<Option<&Py<Ledger>>> = (start..stop)
            .map(|at| {
                if !self.steppable(at, max_steps) {
                    return None;
                }
                let ledger = table.find(self.key_of(at));
                if let Some(l) = ledger {
                    prefetch(l.as_ptr().cast(), LEDGER_BYTES);
                }
                ledger
            })
            .collect();
        for first in ledgers.iter().take(2).flatten() {
            prefetch_session(py, first);
        }
        let mut at = start;
        let mut why = TO_PYTHON;
        // One scratch step output for the run (the thread's: no allocation once it has grown).
        let mut out = PySession::take_out();
        while at < stop {
            let ids = &self.ids[self.offsets[at]..self.offsets[at + 1]];
            let key = self.key_of(at);
            if let Some(Some(next)) = ledgers.get(at + 2 - start) {
                prefetch_session(py, next);
            }
            if let Some(Some(next)) = ledgers.get(at + 1 - start) {
                prefetch_buffers(py, next);
            }
            let item = self.item(
                py,
                ledgers[at - start],
                key,
                ids,
                max_tokens,
                &mut out,
                &mut w,
            );
            match item {
                Ok(Stepped::Done(())) => at += 1,
                Ok(Stepped::Declined) => break,
                Ok(Stepped::Failed) => {
                    // A step that panicked may have left the scratch half written.
                    out = StepOut::default();
                    why = FAILED;
                    break;
                }
                Err(e) => {
                    PySession::give_back_out(out);
                    return Err(e);
                }
            }
        }
        PySession::give_back_out(out);
        Ok((at, why, PyBytes::new(py, &w.finish())))
    }

    fn __len__(&self) -> usize {
        self.len()
    }

    /// The items' keys, a new list of str (the path that applies every item in Python).
    #[getter]
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let keys = PyList::empty(py);
        for i in 0..self.len() {
            keys.append(self.key_str(py, i)?)?;
        }
        Ok(keys)
    }

    /// Item `item`'s key (for the items Python applies).
    fn key<'py>(&self, py: Python<'py>, item: usize) -> PyResult<Bound<'py, PyString>> {
        if item >= self.len() {
            return Err(pyo3::exceptions::PyIndexError::new_err(
                "no such packed item",
            ));
        }
        self.key_str(py, item)
    }

    /// With `others` (the message's entries' keys): None when a key, theirs or an item's, is
    /// empty; else whether all of them are distinct (`BatchProtocol._apply`'s checks, made
    /// with no Python object per item).
    fn distinct(&self, others: Vec<Bound<'_, PyString>>) -> PyResult<Option<bool>> {
        let mut seen: HashSet<&[u8], KeyState> =
            HashSet::with_capacity_and_hasher(self.len() + others.len(), KeyState::default());
        let mut distinct = true;
        let mut empty = false;
        for key in &others {
            let key = key.to_str()?.as_bytes();
            empty |= key.is_empty();
            distinct &= seen.insert(key);
        }
        for i in 0..self.len() {
            let key = self.key_of(i);
            empty |= key.is_empty();
            distinct &= seen.insert(key);
        }
        Ok((!empty).then_some(distinct))
    }

    /// With `items` (the message's packed items, when it has any): None when a key, an entry's
    /// (these are a message's entries) or an item's, is empty; else whether all of them are
    /// distinct: `distinct` with no Python object per entry either.
    #[pyo3(signature = (items = None))]
    fn distinct_with_items(&self, items: Option<PyRef<'_, PackedSteps>>) -> Option<bool> {
        let more = items.as_ref().map_or(0, |p| p.len());
        let mut seen: HashSet<&[u8], KeyState> =
            HashSet::with_capacity_and_hasher(self.len() + more, KeyState::default());
        let mut distinct = true;
        let mut empty = false;
        let theirs = items.iter().flat_map(|p| (0..p.len()).map(|i| p.key_of(i)));
        for key in (0..self.len()).map(|i| self.key_of(i)).chain(theirs) {
            empty |= key.is_empty();
            distinct &= seen.insert(key);
        }
        (!empty).then_some(distinct)
    }

    /// Entry `item`'s number of steps when it is nothing but steps of token ids, else None
    /// (None for a packed item too: it is one step by its framing).
    fn entry_steps(&self, item: usize) -> Option<u32> {
        self.entries.as_ref()?.steps.get(item).copied().flatten()
    }

    /// The indexes of the entries that carry an `Open` (empty for packed items).
    #[getter]
    fn opening(&self) -> Vec<usize> {
        self.entries
            .as_ref()
            .map_or_else(Vec::new, |e| e.opening.clone())
    }

    /// Item `item`'s token ids (for the items Python applies).
    fn ids_of(&self, item: usize) -> PyResult<Vec<u32>> {
        if item + 1 >= self.offsets.len() {
            return Err(pyo3::exceptions::PyIndexError::new_err(
                "no such packed item",
            ));
        }
        Ok(self.ids[self.offsets[item]..self.offsets[item + 1]].to_vec())
    }
}

/// A `ParseBatchRequest`'s bytes read here, so that its packed items never become a Python
/// message or Python lists of ids: (the request's `sessions` entries as `ParseBatchRequest`
/// bytes for Python to parse, the packed items as `PackedSteps` or None when the message has no
/// `packed`). None when anything is not plainly valid — malformed bytes, a wire type other than
/// the field's, a group, an id beyond 32 bits, a key that is no UTF-8, counts that do not frame
/// the ids: Python then decodes the bytes as it always has, and answers exactly as before
/// (`service/decoding.py`'s INVALID_ARGUMENT, `Packed.of`'s framing errors). Read by hand, not
/// by the generated messages: prost's decoding (a `String` or `Bytes` per key) took 2-3 times as
/// long per item, about 5% of the packed path's throughput.
#[pyfunction]
pub fn read_batch<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Option<ReadBatch<'py>>> {
    let Some(read) = Request::read(data) else {
        return Ok(None);
    };
    let packed = match read.packed {
        None => None,
        Some(p) => {
            let Some(offsets) = p.offsets() else {
                return Ok(None);
            };
            // Each key was checked as UTF-8 when read.
            let (key_bytes, key_offsets) = joined(p.keys.iter().map(|&(lo, hi)| &data[lo..hi]));
            let steps = PackedSteps {
                key_bytes,
                key_offsets,
                ids: p.ids,
                offsets,
                entries: None,
            };
            Some(Py::new(py, steps)?)
        }
    };
    let entries = match read.entries {
        Some(e) if !e.steps.is_empty() => Some(Py::new(py, e.into_steps(data))?),
        _ => None,
    };
    Ok(Some((PyBytes::new(py, &read.sessions), packed, entries)))
}

/// `read_batch`'s answer: the entries' bytes, the packed items, the entries as the core steps
/// them (None when there are none, or one of them is beyond this reader: Python applies them).
type ReadBatch<'py> = (
    Bound<'py, PyBytes>,
    Option<Py<PackedSteps>>,
    Option<Py<PackedSteps>>,
);

/// What `read_batch` takes from a request: its entries' records as they are, the packed items,
/// the entries as read here (None once one could not be).
struct Request {
    sessions: Vec<u8>,
    packed: Option<Packed>,
    entries: Option<EntriesRead>,
}

/// The entries of a request as `read_batch` reads them: each one's key (the last `key` field,
/// as protobuf reads it; empty when it has none), and the ids of its steps when it is nothing
/// but steps of token ids.
#[derive(Default)]
struct EntriesRead {
    keys: Vec<(usize, usize)>,
    ids: Vec<u32>,
    offsets: Vec<usize>,
    steps: Vec<Option<u32>>,
    opening: Vec<usize>,
}

impl EntriesRead {
    /// The entry in `data[lo..hi]`; None when it holds anything this reader cannot read for
    /// sure (then no entry is the core's: protobuf decides them all, as before).
    fn read(&mut self, data: &[u8], lo: usize, hi: usize) -> Option<()> {
        let mut r = Reader {
            data: &data[..hi],
            at: lo,
        };
        let mark = self.ids.len();
        let mut key = (lo, lo);
        let mut steps = Some(0u32);
        let mut opens = false;
        while !r.done() {
            let (field, wire) = r.tag()?;
            match (field, wire) {
                (1, 2) => {
                    let (a, b) = r.len_delimited()?;
                    key = (a, b);
                }
                (3, 2) => {
                    let (a, b) = r.len_delimited()?;
                    if steps.is_some() && self.read_step(data, a, b).is_none() {
                        steps = None;
                    }
                    steps = steps.map(|n| n.saturating_add(1));
                }
                (2, 2) => {
                    r.len_delimited()?;
                    opens = true;
                    steps = None;
                }
                _ => {
                    r.skip(wire)?;
                    steps = None;
                }
            }
        }
        std::str::from_utf8(&data[key.0..key.1]).ok()?;
        if steps.is_none() {
            self.ids.truncate(mark);
        }
        if opens {
            self.opening.push(self.keys.len());
        }
        self.keys.push(key);
        self.steps.push(steps);
        self.offsets.push(self.ids.len());
        Some(())
    }

    /// A step's ids appended; None (its ids in part, perhaps) when it has any other field, or
    /// an id beyond 32 bits.
    fn read_step(&mut self, data: &[u8], lo: usize, hi: usize) -> Option<()> {
        let mut r = Reader {
            data: &data[..hi],
            at: lo,
        };
        while !r.done() {
            match r.tag()? {
                (1, 2) => {
                    let (a, b) = r.len_delimited()?;
                    let mut inner = Reader {
                        data: &data[..b],
                        at: a,
                    };
                    while !inner.done() {
                        self.ids.push(u32::try_from(inner.varint()?).ok()?);
                    }
                }
                (1, 0) => self.ids.push(u32::try_from(r.varint()?).ok()?),
                _ => return None,
            }
        }
        Some(())
    }

    fn into_steps(self, data: &[u8]) -> PackedSteps {
        let (key_bytes, key_offsets) = joined(self.keys.iter().map(|&(lo, hi)| &data[lo..hi]));
        let mut offsets = Vec::with_capacity(self.offsets.len() + 1);
        offsets.push(0);
        offsets.extend(self.offsets);
        PackedSteps {
            key_bytes,
            key_offsets,
            ids: self.ids,
            offsets,
            entries: Some(Entries {
                steps: self.steps,
                opening: self.opening,
            }),
        }
    }
}

#[derive(Default)]
struct Packed {
    /// Each key's bytes in the request.
    keys: Vec<(usize, usize)>,
    counts: Vec<u32>,
    ids: Vec<u32>,
}

impl Packed {
    /// Item `i`'s ids are `ids[offsets[i]..offsets[i + 1]]`, as `Packed.of` frames them (no
    /// counts: one id per key); None when they do not add up.
    fn offsets(&self) -> Option<Vec<usize>> {
        offsets(self.keys.len(), &self.counts, self.ids.len())
    }
}

impl Request {
    fn read(data: &[u8]) -> Option<Request> {
        let mut r = Reader { data, at: 0 };
        let mut sessions = Vec::new();
        let mut packed: Option<Packed> = None;
        let mut entries = Some(EntriesRead::default());
        while !r.done() {
            let start = r.at;
            let (field, wire) = r.tag()?;
            match (field, wire) {
                (1, 2) => {
                    let (lo, hi) = r.len_delimited()?;
                    sessions.extend_from_slice(&data[start..r.at]);
                    if entries
                        .as_mut()
                        .and_then(|e| e.read(data, lo, hi))
                        .is_none()
                    {
                        entries = None;
                    }
                }
                (2, 2) => {
                    let (lo, hi) = r.len_delimited()?;
                    // A message field seen twice merges: its repeated fields append.
                    Packed::read(data, lo, hi, packed.get_or_insert_with(Packed::default))?;
                }
                (1, _) | (2, _) => return None,
                _ => r.skip(wire)?,
            }
        }
        Some(Request {
            sessions,
            packed,
            entries,
        })
    }
}

impl Packed {
    fn read(data: &[u8], lo: usize, hi: usize, into: &mut Packed) -> Option<()> {
        let mut r = Reader {
            data: &data[..hi],
            at: lo,
        };
        while !r.done() {
            let (field, wire) = r.tag()?;
            match (field, wire) {
                (1, 2) => {
                    let (a, b) = r.len_delimited()?;
                    std::str::from_utf8(&data[a..b]).ok()?;
                    into.keys.push((a, b));
                }
                (2, 2) | (3, 2) => {
                    let (a, b) = r.len_delimited()?;
                    let list = if field == 2 {
                        &mut into.counts
                    } else {
                        &mut into.ids
                    };
                    let mut inner = Reader {
                        data: &data[..b],
                        at: a,
                    };
                    while !inner.done() {
                        list.push(u32::try_from(inner.varint()?).ok()?);
                    }
                }
                (2, 0) | (3, 0) => {
                    let v = u32::try_from(r.varint()?).ok()?;
                    if field == 2 {
                        into.counts.push(v);
                    } else {
                        into.ids.push(v);
                    }
                }
                (1..=3, _) => return None,
                _ => r.skip(wire)?,
            }
        }
        Some(())
    }
}

/// Protobuf's wire format, read strictly: any doubt is None.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn done(&self) -> bool {
        self.at >= self.data.len()
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.data.get(self.at)?;
            self.at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                // The tenth byte holds one bit; more is not a 64-bit varint.
                return (shift < 63 || b <= 1).then_some(v);
            }
        }
        None
    }

    /// (field number, wire type); field 0 and numbers beyond protobuf's range are invalid.
    fn tag(&mut self) -> Option<(u32, u8)> {
        let tag = self.varint()?;
        let field = u32::try_from(tag >> 3).ok()?;
        if field == 0 || field > 536_870_911 {
            return None;
        }
        Some((field, (tag & 7) as u8))
    }

    /// A length-delimited field's bounds, the reader after it.
    fn len_delimited(&mut self) -> Option<(usize, usize)> {
        let len = usize::try_from(self.varint()?).ok()?;
        let lo = self.at;
        let hi = lo.checked_add(len)?;
        if hi > self.data.len() {
            return None;
        }
        self.at = hi;
        Some((lo, hi))
    }

    /// An unknown field's value (groups are left to Python).
    fn skip(&mut self, wire: u8) -> Option<()> {
        match wire {
            0 => {
                self.varint()?;
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if self.at + n > self.data.len() {
                    return None;
                }
                self.at += n;
            }
            2 => {
                self.len_delimited()?;
            }
            _ => return None,
        }
        Some(())
    }
}

/// Keys one after another, and where each begins (`PackedSteps::key_of`).
fn joined<'a>(keys: impl ExactSizeIterator<Item = &'a [u8]>) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = Vec::new();
    let mut at = Vec::with_capacity(keys.len() + 1);
    at.push(0);
    for key in keys {
        bytes.extend_from_slice(key);
        at.push(bytes.len());
    }
    (bytes, at)
}

/// Item `i`'s ids are `ids[offsets[i]..offsets[i + 1]]`, as `Packed.of` frames `n` items (no
/// counts: one id per key); None when they do not add up.
fn offsets(n: usize, counts: &[u32], ids: usize) -> Option<Vec<usize>> {
    let mut offsets = Vec::with_capacity(n + 1);
    offsets.push(0);
    if counts.is_empty() {
        offsets.extend(1..=n);
    } else {
        if counts.len() != n {
            return None;
        }
        let mut at = 0usize;
        for &c in counts {
            at += c as usize;
            offsets.push(at);
        }
    }
    (offsets[n] == ids).then_some(offsets)
}

impl PackedSteps {
    fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Whether item `i` may be the core's: every packed item; an entry only when it is nothing
    /// but steps of token ids, at most `max_steps` of them (more: Python's limit refuses it).
    fn steppable(&self, i: usize, max_steps: u64) -> bool {
        match &self.entries {
            None => true,
            Some(e) => e.steps[i].is_some_and(|n| u64::from(n) <= max_steps),
        }
    }

    /// Item `i`'s key bytes (UTF-8).
    fn key_of(&self, i: usize) -> &[u8] {
        &self.key_bytes[self.key_offsets[i]..self.key_offsets[i + 1]]
    }

    fn key_str<'py>(&self, py: Python<'py>, i: usize) -> PyResult<Bound<'py, PyString>> {
        let key = std::str::from_utf8(self.key_of(i))
            .map_err(|_| pyo3::exceptions::PyValueError::new_err("packed: a key is not UTF-8"))?;
        Ok(PyString::new(py, key))
    }

    /// Step one item (`ledger::step`, the one plain step): `ledger` is what the table holds for
    /// `key` (None: Python's item); `out` is the run's scratch step output.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn item(
        &self,
        py: Python<'_>,
        ledger: Option<&Py<Ledger>>,
        key: &[u8],
        ids: &[u32],
        max_tokens: u64,
        out: &mut StepOut,
        w: &mut Replies,
    ) -> PyResult<Stepped<()>> {
        let Some(ledger) = ledger else {
            return Ok(Stepped::Declined);
        };
        let whole = self.entries.is_some();
        ledger::step(
            py,
            ledger.bind(py),
            ids,
            max_tokens,
            false,
            out,
            |l, out, t| {
                if let Some(t) = t {
                    w.reply(key, l, out, &t, whole);
                }
            },
        )
    }
}

/// A ledger object's bytes as Python holds it (its header and pyo3's borrow flag, then the
/// `Ledger`): what `item` reads of it.
const LEDGER_BYTES: usize = 64 + std::mem::size_of::<Ledger>();
/// The part of a native session's object a step reads first (its header and borrow flag, the
/// engine's state held inline); its heap buffers come as the step reaches them.
const SESSION_BYTES: usize = {
    let n = 64 + std::mem::size_of::<PySession>();
    if n < 4096 {
        n
    } else {
        4096
    }
};

/// The native session of an item two ahead, asked of the memory system while this item steps
/// (its object: the state held inline): a step takes far longer than a fetch. Only a hint: a
/// ledger borrowed elsewhere (never, in one `step` call) is skipped.
fn prefetch_session(py: Python<'_>, ledger: &Py<Ledger>) {
    if let Ok(ledger) = ledger.bind(py).try_borrow() {
        if let Some(session) = &ledger.session {
            prefetch(session.as_ptr().cast(), SESSION_BYTES);
        }
    }
}

/// The buffers the next item's step reaches first (its session's object came in during the
/// step before: `prefetch_session`).
fn prefetch_buffers(py: Python<'_>, ledger: &Py<Ledger>) {
    if let Ok(ledger) = ledger.bind(py).try_borrow() {
        if let Some(session) = &ledger.session {
            if let Ok(session) = session.bind(py).try_borrow() {
                session.prefetch();
            }
        }
    }
}

/// The replies of a run of items, as the fields of a `ParseBatchResponse`: `sessions` entries
/// (field 2, `reply::write`'s) written whole, the packed outputs' arrays (field 4's fields)
/// written here as they grow, item by item, and framed at the end: the run's replies then cost
/// no allocation each (generated messages, a `String` per key and text, cost a fifth of the
/// packed path's throughput: `reply.rs`).
#[derive(Default)]
struct Replies {
    sessions: Vec<u8>,
    keys: Vec<u8>,
    sequences: Vec<u8>,
    messages: Vec<u8>,
    texts: Vec<u8>,
    reasoning: Vec<u8>,
    digests: Vec<u8>,
    scratch: Vec<u8>,
    delta: Vec<u8>,
}

impl Replies {
    /// Room for `items` one-token replies, so a slice's run grows no buffer (the reallocations
    /// were a tenth of the packed path's time in a live server's profile).
    fn for_items(items: usize) -> Self {
        Replies {
            sessions: Vec::with_capacity(items * 4),
            keys: Vec::with_capacity(items * 16),
            sequences: Vec::with_capacity(items * 3),
            messages: Vec::with_capacity(items * 3),
            texts: Vec::with_capacity(items * 8),
            reasoning: Vec::with_capacity(items),
            digests: Vec::with_capacity(items * 4),
            scratch: Vec::with_capacity(256),
            delta: Vec::with_capacity(128),
        }
    }

    /// What a stepped item answers (as `SessionProtocol.take_ids` and `BatchProtocol` would);
    /// `whole`: an entry's, always a `SessionOutput` (a packed item's plain text delta is
    /// written packed: `rules.packed_delta`).
    fn reply(&mut self, key: &[u8], ledger: &Ledger, out: &StepOut, t: &Taken, whole: bool) {
        if !whole && t.events == 0 && t.deltas == 1 && out.deltas[0].kind != DeltaKind::Call {
            let d = &out.deltas[0];
            let text = out.delta_text(d.text);
            length_delimited(&mut self.keys, PACKED_KEYS, key);
            encode_varint(t.sequence, &mut self.sequences);
            encode_varint(ledger.client_messages, &mut self.messages);
            length_delimited(&mut self.texts, PACKED_TEXTS, text.as_bytes());
            let reasoning = d.kind == DeltaKind::Reasoning && !text.is_empty();
            encode_varint(u64::from(reasoning), &mut self.reasoning);
            self.digests
                .extend_from_slice(&ledger.digest.value.to_le_bytes());
            return;
        }
        let s = &mut self.scratch;
        s.clear();
        length_delimited(s, 1, key);
        let (client_messages, digest) = (ledger.client_messages, ledger.digest.value);
        reply::write(
            s,
            &mut self.delta,
            SESSION_OUTPUT,
            t,
            client_messages,
            digest,
            out,
        );
        length_delimited(&mut self.sessions, BATCH_SESSIONS, s);
    }

    /// The `ParseBatchResponse` bytes: the session entries, then one `packed` with the arrays.
    fn finish(mut self) -> Vec<u8> {
        if self.keys.is_empty() {
            return self.sessions;
        }
        let arrays = [
            (PACKED_SEQUENCES, &self.sequences),
            (PACKED_MESSAGES, &self.messages),
            (PACKED_REASONING, &self.reasoning),
            (PACKED_DIGESTS, &self.digests),
        ];
        let size = self.keys.len()
            + self.texts.len()
            + arrays
                .iter()
                .map(|(tag, a)| key_len(*tag) + encoded_len_varint(a.len() as u64) + a.len())
                .sum::<usize>();
        let mut out = std::mem::take(&mut self.sessions);
        out.reserve(size + 11);
        encode_key(BATCH_PACKED, WireType::LengthDelimited, &mut out);
        encode_varint(size as u64, &mut out);
        out.extend_from_slice(&self.keys);
        length_delimited(&mut out, PACKED_SEQUENCES, &self.sequences);
        length_delimited(&mut out, PACKED_MESSAGES, &self.messages);
        out.extend_from_slice(&self.texts);
        length_delimited(&mut out, PACKED_REASONING, &self.reasoning);
        length_delimited(&mut out, PACKED_DIGESTS, &self.digests);
        out
    }
}

/// `ParseBatchResponse`'s `sessions` and `packed`; `PackedOutputs`' fields, in order.
const BATCH_SESSIONS: u32 = 2;
const BATCH_PACKED: u32 = 4;
const PACKED_KEYS: u32 = 1;
const PACKED_SEQUENCES: u32 = 2;
const PACKED_MESSAGES: u32 = 3;
const PACKED_TEXTS: u32 = 4;
const PACKED_REASONING: u32 = 5;
const PACKED_DIGESTS: u32 = 6;

/// A length-delimited field (a string, a packed array) appended to `buf`.
fn length_delimited(buf: &mut Vec<u8>, tag: u32, data: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(data.len() as u64, buf);
    buf.extend_from_slice(data);
}

//! The detokenizer as Python sees it: `Vocabulary` (one per tokenizer), `Detokenizer` (a
//! vocabulary with one bound grammar's markers, one per model) and `Scanner` (one per session).

use std::sync::Arc;

use parsetier_engine::detok::{Marks, Scanner as CoreScanner, Step, Vocab};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// A decoder step as `native.py` spells it: (kind, text, text, count, count).
type StepSpec = (String, String, String, usize, usize);

fn one_char(text: &str, what: &str) -> PyResult<char> {
    let mut chars = text.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => Ok(c),
        _ => Err(PyValueError::new_err(format!(
            "{what} must be one character"
        ))),
    }
}

fn step(spec: StepSpec) -> PyResult<Step> {
    let (kind, a, b, m, n) = spec;
    Ok(match kind.as_str() {
        "ByteLevel" => Step::ByteLevel,
        "ByteFallback" => Step::ByteFallback,
        "Fuse" => Step::Fuse,
        "Replace" => Step::Replace {
            pattern: a,
            content: b,
        },
        "Strip" => Step::Strip {
            content: one_char(&a, "Strip content")?,
            start: m,
            stop: n,
        },
        "Metaspace" => Step::Metaspace {
            replacement: one_char(&a, "Metaspace replacement")?,
            prepend: m != 0,
        },
        other => {
            return Err(PyValueError::new_err(format!(
                "unsupported decoder step {other}"
            )))
        }
    })
}

/// A tokenizer's vocabulary as its decoder sees it (`tokens[id]` = `id_to_token(id)`).
#[pyclass(frozen, module = "parsetier._core")]
pub struct Vocabulary {
    inner: Arc<Vocab>,
}

#[pymethods]
impl Vocabulary {
    #[new]
    #[pyo3(signature = (tokens, decoder, added, probe=None))]
    fn new(
        tokens: Vec<Option<String>>,
        decoder: Option<Vec<StepSpec>>,
        added: Vec<u32>,
        probe: Option<u32>,
    ) -> PyResult<Self> {
        let steps = decoder
            .map(|d| d.into_iter().map(step).collect::<PyResult<Vec<_>>>())
            .transpose()?;
        let inner = Vocab::new(&tokens, steps, &added, probe).map_err(PyValueError::new_err)?;
        Ok(Vocabulary {
            inner: Arc::new(inner),
        })
    }

    /// `Tokenizer.decode(ids, skip_special_tokens=False)`.
    fn decode(&self, ids: Vec<u32>) -> String {
        let mut out = String::new();
        self.inner.decode(&ids, &mut out);
        out
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

impl Vocabulary {
    pub fn shared(&self) -> Arc<Vocab> {
        self.inner.clone()
    }
}

/// A vocabulary with one bound grammar's marker ids (`BoundGrammar.mark_of_id`).
#[pyclass(frozen, module = "parsetier._core")]
pub struct Detokenizer {
    pub vocab: Arc<Vocab>,
    pub marks: Arc<Marks>,
    /// Which ids a step may hold (`BoundGrammar.vocab_size` / `known_ids`), for the sessions'
    /// checked fast path.
    pub valid: Arc<ValidIds>,
}

/// The ids `Session._check_ids` accepts: below the vocabulary size, and in the known set of a
/// sparse vocabulary.
pub struct ValidIds {
    size: u32,
    known: Option<Vec<bool>>,
}

impl ValidIds {
    pub fn contains(&self, id: u32) -> bool {
        id < self.size
            && self
                .known
                .as_ref()
                .is_none_or(|k| k.get(id as usize).copied().unwrap_or(false))
    }
}

#[pymethods]
impl Detokenizer {
    #[new]
    #[pyo3(signature = (vocab, marks, vocab_size=0, known_ids=None))]
    fn new(
        vocab: &Vocabulary,
        marks: Vec<(u32, String, String)>,
        vocab_size: u32,
        known_ids: Option<Vec<u32>>,
    ) -> Self {
        let known = known_ids.map(|ids| {
            let mut set = vec![false; vocab_size as usize];
            for id in ids {
                if let Some(slot) = set.get_mut(id as usize) {
                    *slot = true;
                }
            }
            set
        });
        Detokenizer {
            vocab: vocab.shared(),
            marks: Arc::new(Marks::new(marks)),
            valid: Arc::new(ValidIds {
                size: vocab_size,
                known,
            }),
        }
    }

    /// The index of the first id of `ids` a step may not hold (`ValidIds`), None when all are
    /// valid: `Session._check_ids` of a long prompt without a Python comparison per id. An
    /// entry that is no int of 32 bits raises (`TypeError` / `OverflowError`): the caller's
    /// own check then says what is wrong.
    fn first_invalid(&self, ids: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
        let ids = ids_from(ids, false)?;
        Ok(ids.iter().position(|&id| !self.valid.contains(id)))
    }

    /// One session's scanner, seeded with the prompt's tail.
    #[pyo3(signature = (prompt_ids=Vec::new()))]
    fn scanner(&self, prompt_ids: Vec<u32>) -> Scanner {
        Scanner {
            inner: CoreScanner::new(self.vocab.clone(), self.marks.clone(), &prompt_ids),
        }
    }
}

/// `TokenScanner`: `piece(id)` / `run(ids)` → text in sentinel form.
#[pyclass(module = "parsetier._core")]
pub struct Scanner {
    inner: CoreScanner,
}

#[pymethods]
impl Scanner {
    fn piece(&mut self, token_id: u32) -> String {
        let mut out = String::new();
        self.inner.piece(token_id, &mut out);
        out
    }

    fn run(&mut self, token_ids: Vec<u32>) -> String {
        let mut out = String::new();
        self.inner.run(&token_ids, &mut out);
        out
    }

    /// `TokenScanner.flush`: the text the stream still holds at the end of the output.
    fn flush(&mut self) -> String {
        let mut out = String::new();
        self.inner.flush(&mut out);
        out
    }

    /// `"".join(piece(id) for id in ids)`: the text of a prompt's tail (`start_and_echo`).
    fn text(&mut self, token_ids: &Bound<'_, PyAny>) -> PyResult<String> {
        let mut out = String::new();
        for id in ids_from(token_ids, false)? {
            self.inner.piece(id, &mut out);
        }
        Ok(out)
    }

    /// `piece` for each id, in one call (the benchmark's and the tests' loop without Python).
    fn pieces(&mut self, token_ids: Vec<u32>) -> Vec<String> {
        token_ids
            .iter()
            .map(|&id| {
                let mut out = String::new();
                self.inner.piece(id, &mut out);
                out
            })
            .collect()
    }
}

/// The ids of a list or tuple of ints (read in place, item by item), or of any other sequence
/// PyO3 extracts. `exact`: every id must be an `int` itself (no `bool`, no other type with
/// `__index__`), so that its decimal is its `str` (`decimal_ids`); else `TypeError`.
pub fn ids_from(ids: &Bound<'_, PyAny>, exact: bool) -> PyResult<Vec<u32>> {
    let items = if let Ok(list) = ids.cast::<PyList>() {
        // A copy of the list's items (a tuple), so nothing run while reading can change it.
        list.as_sequence().to_tuple()?
    } else if let Ok(tuple) = ids.cast::<PyTuple>() {
        tuple.clone()
    } else if exact {
        return Err(PyTypeError::new_err("token ids must be a list or tuple"));
    } else {
        return ids.extract();
    };
    let mut out = Vec::with_capacity(items.len());
    for id in items.iter_borrowed() {
        // An exact int is read with one C call; anything else goes through PyO3's conversion.
        let value = if id.get_type_ptr() == std::ptr::addr_of_mut!(pyo3::ffi::PyLong_Type) {
            // SAFETY: `id` is an `int`; -1 with an exception set is an overflow.
            let v = unsafe { pyo3::ffi::PyLong_AsLongLong(id.as_ptr()) };
            if v == -1 && PyErr::occurred(ids.py()) {
                return Err(PyErr::fetch(ids.py()));
            }
            u32::try_from(v).map_err(|_| PyOverflowError::new_err("token id out of range"))?
        } else if exact {
            return Err(PyTypeError::new_err("token ids must be ints"));
        } else {
            id.extract::<u32>()?
        };
        out.push(value);
    }
    Ok(out)
}

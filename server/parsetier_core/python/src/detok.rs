//! The detokenizer as Python sees it: `Vocabulary` (one per tokenizer), `Detokenizer` (a
//! vocabulary with one bound grammar's markers, one per model) and `Scanner` (one per session).

use std::sync::Arc;

use parsetier_engine::detok::{Marks, Scanner as CoreScanner, Step, Vocab};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

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

//! PyO3 wrapper for [`crate::automaton::Automaton`]: `racer_ref._core.Automaton`.
//!
//! Only argument conversion lives here; the core checks every range. Integers are read the
//! same way as in the Python twin: `bool` and non-integers are a `TypeError`, out-of-range
//! values a `ValueError`, both naming the argument, and `extend` reads and checks the whole
//! input before committing any of it.

use std::sync::Mutex;

use numpy::{PyArray1, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::{int_or_default, int_value, lock, refuse_copy, type_name};
use crate::automaton::{Automaton, Paths};
use crate::error::Error;
use crate::{check_capacity, TokenId, DEFAULT_MAX_NODES, DEFAULT_MIN_BORDER_DEPTH, DEFAULT_NGRAM};

/// Read every token of `tokens` into `out`, checking each one; nothing is committed here.
fn read_tokens(tokens: &Bound<'_, PyAny>, out: &mut Vec<TokenId>) -> PyResult<()> {
    out.clear();
    let mut push = |i: usize, item: &Bound<'_, PyAny>| -> PyResult<()> {
        let v = int_value(item, "tokens", Some(i))?;
        out.push(Automaton::check_token("tokens", Some(i), v)?);
        Ok(())
    };
    // Lists first: what a decoding loop passes (a few tokens per step), and no numpy type
    // check needed. Items are read by index, with no iterator object in between.
    if let Ok(list) = tokens.cast::<PyList>() {
        let mut i = 0;
        // `len()` is read again each time: `int_value` cannot run Python code for an int,
        // but a subclass's `__index__` could shrink the list under us.
        while i < list.len() {
            push(i, &list.get_item(i)?)?;
            i += 1;
        }
        return Ok(());
    }
    if let Ok(tuple) = tokens.cast::<PyTuple>() {
        for (i, item) in tuple.iter().enumerate() {
            push(i, &item)?;
        }
        return Ok(());
    }
    if let Ok(arr) = tokens.cast::<PyUntypedArray>() {
        return read_array(tokens, arr, out);
    }
    let iter = tokens.try_iter().map_err(|_| {
        let name = type_name(tokens);
        Error::type_("tokens", format!("must be an iterable of ints, got {name}"))
    })?;
    for (i, item) in iter.enumerate() {
        push(i, &item?)?;
    }
    Ok(())
}

/// The numpy case of `read_tokens`: a 1-D array of any integer dtype.
fn read_array(
    tokens: &Bound<'_, PyAny>,
    arr: &Bound<'_, PyUntypedArray>,
    out: &mut Vec<TokenId>,
) -> PyResult<()> {
    let kind = arr.dtype().kind();
    if kind != b'i' && kind != b'u' {
        let dtype = arr.dtype().str().map(|s| s.to_string()).unwrap_or_default();
        let msg = format!("must be an array of ints, got dtype {dtype}");
        return Err(Error::type_("tokens", msg).into());
    }
    if arr.ndim() != 1 {
        // Written like Python's tuple repr, as in the twin: (), (2, 3).
        let dims: Vec<String> = arr.shape().iter().map(|d| d.to_string()).collect();
        let msg = format!("must be 1-D, got shape ({})", dims.join(", "));
        return Err(Error::value("tokens", msg).into());
    }
    // One typed path per integer dtype (the array may be non-contiguous).
    macro_rules! typed {
        ($($t:ty),*) => {$(
            if let Ok(a) = tokens.cast::<PyArray1<$t>>() {
                let view = a.readonly();
                // Each value is checked in its own dtype, so a uint64 above 2**63 is
                // reported as itself.
                for (i, &v) in view.as_array().iter().enumerate() {
                    out.push(Automaton::check_token("tokens", Some(i), v)?);
                }
                return Ok(());
            }
        )*};
    }
    typed!(i64, i32, u32, u64, i16, u16, i8, u8);
    // Other integer dtypes (e.g. longlong on platforms where it differs): element by element.
    for (i, item) in tokens.try_iter()?.enumerate() {
        let item = item?;
        let v = int_value(&item, "tokens", Some(i))?;
        out.push(Automaton::check_token("tokens", Some(i), v)?);
    }
    Ok(())
}

/// The Aho-Corasick n-gram automaton of RACER's retrieval tree (Rust core).
///
/// Same API and results as ``racer_ref.reference.Automaton``; see ``racer_ref/_core.pyi``.
#[pyclass(name = "Automaton", module = "racer_ref._core", frozen)]
pub struct PyAutomaton {
    /// The core object and its buffers, one call at a time (see [`lock`]).
    inner: Mutex<State>,
    // The parameters never change: read without the lock.
    max_nodes: usize,
    ngram: usize,
    min_border_depth: usize,
}

/// What a call locks: the automaton, and buffers reused between calls (the tokens of
/// `extend`, the paths of `retrieve`).
struct State {
    automaton: Automaton,
    tokens: Vec<TokenId>,
    paths: Paths,
}

#[pymethods]
impl PyAutomaton {
    /// `None` for an argument means its default, as in the Python twin.
    #[new]
    #[pyo3(signature = (max_nodes = None, ngram = None, min_border_depth = None))]
    #[pyo3(text_signature = "(max_nodes=10000, ngram=10, min_border_depth=2)")]
    fn new(
        max_nodes: Option<&Bound<'_, PyAny>>,
        ngram: Option<&Bound<'_, PyAny>>,
        min_border_depth: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        // Read in the twin's order (ngram first: the other two ranges depend on it).
        let ngram = int_or_default(ngram, "ngram", DEFAULT_NGRAM as i64)?;
        let max_nodes = int_or_default(max_nodes, "max_nodes", DEFAULT_MAX_NODES as i64)?;
        let min_border_depth = int_or_default(
            min_border_depth,
            "min_border_depth",
            DEFAULT_MIN_BORDER_DEPTH as i64,
        )?;
        let automaton = Automaton::new(max_nodes, ngram, min_border_depth)?;
        Ok(PyAutomaton {
            max_nodes: automaton.max_nodes(),
            ngram: automaton.ngram(),
            min_border_depth: automaton.min_border_depth(),
            inner: Mutex::new(State {
                automaton,
                tokens: Vec::new(),
                paths: Paths::default(),
            }),
        })
    }

    /// Commit tokens (step 9): a list, tuple, 1-D integer numpy array or any iterable
    /// of ints in [0, 2**32 - 1]. All are checked before any is committed.
    fn extend(&self, tokens: &Bound<'_, PyAny>) -> PyResult<()> {
        // Read outside the lock (reading may run Python code: a generator, `__index__`),
        // into the reused buffer; then commit under the lock.
        let mut buf = std::mem::take(&mut lock(&self.inner, "Automaton")?.tokens);
        read_tokens(tokens, &mut buf)?;
        let mut state = lock(&self.inner, "Automaton")?;
        state.automaton.extend(&buf);
        state.tokens = buf;
        Ok(())
    }

    /// The retrieval tree's root-to-leaf paths (step 2); at most `capacity` distinct
    /// nodes, root included.
    fn retrieve<'py>(
        &self,
        root: &Bound<'py, PyAny>,
        capacity: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let py = root.py();
        let root = Automaton::check_token("root", None, int_value(root, "root", None)?)?;
        let capacity = check_capacity(int_value(capacity, "capacity", None)?)?;
        let mut state = lock(&self.inner, "Automaton")?;
        let State {
            automaton, paths, ..
        } = &mut *state;
        automaton.retrieve_into(root, capacity, paths)?;
        // A list of lists of ints, built with PyO3's safe constructors.
        let lists = paths
            .iter()
            .map(|path| PyList::new(py, path))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, lists)
    }

    /// The borders for `root`, longest first, each as its token string (a suffix of the
    /// committed tokens, then `root`).
    fn borders(&self, root: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<TokenId>>> {
        let root = Automaton::check_token("root", None, int_value(root, "root", None)?)?;
        let automaton = &mut lock(&self.inner, "Automaton")?.automaton;
        let states = automaton.borders(root);
        Ok(states.into_iter().map(|s| automaton.path(s)).collect())
    }

    /// Forget everything (trie, windows, matching state, counters).
    fn reset(&self) -> PyResult<()> {
        lock(&self.inner, "Automaton")?.automaton.reset();
        Ok(())
    }

    /// Trie nodes in use, the root excluded.
    fn len(&self) -> PyResult<usize> {
        Ok(lock(&self.inner, "Automaton")?.automaton.len())
    }

    fn __len__(&self) -> PyResult<usize> {
        self.len()
    }

    /// Counters and sizes as a dict of ints.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = lock(&self.inner, "Automaton")?;
        let a = &state.automaton;
        let s = a.stats();
        let d = PyDict::new(py);
        d.set_item("nodes", a.len())?;
        d.set_item("max_nodes", a.max_nodes())?;
        d.set_item("ngram", a.ngram())?;
        d.set_item("min_border_depth", a.min_border_depth())?;
        d.set_item("committed_tokens", s.committed_tokens)?;
        d.set_item("inserts", s.inserts)?;
        d.set_item("evictions", s.evictions)?;
        d.set_item("retrieves", s.retrieves)?;
        d.set_item("fail_hits", s.fail_hits)?;
        d.set_item("fail_misses", s.fail_misses)?;
        d.set_item("matching_depth", a.depth(a.matching_state()))?;
        Ok(d)
    }

    /// Canonical text of the whole automaton (identical to the Python twin's).
    fn dump(&self) -> PyResult<String> {
        Ok(lock(&self.inner, "Automaton")?.automaton.dump())
    }

    #[getter]
    fn max_nodes(&self) -> usize {
        self.max_nodes
    }

    #[getter]
    fn ngram(&self) -> usize {
        self.ngram
    }

    #[getter]
    fn min_border_depth(&self) -> usize {
        self.min_border_depth
    }

    /// `pickle`, `copy.copy` and `copy.deepcopy` (which fall back to this method) are
    /// refused (see [`super::refuse_copy`]).
    fn __reduce_ex__(&self, _protocol: &Bound<'_, PyAny>) -> PyResult<()> {
        Err(refuse_copy("Automaton"))
    }

    fn __repr__(&self) -> String {
        // A repr never fails: while another call runs, the size is not read.
        let nodes = match self.inner.try_lock() {
            Ok(state) => format!("{} nodes", state.automaton.len()),
            Err(_) => "(in use)".to_string(),
        };
        format!(
            "Automaton(max_nodes={}, ngram={}, min_border_depth={}) with {nodes}",
            self.max_nodes, self.ngram, self.min_border_depth
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAutomaton>()?;
    Ok(())
}

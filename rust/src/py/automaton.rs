//! PyO3 wrapper for [`crate::automaton::Automaton`]: `racer_ref._core.Automaton`.
//!
//! Only argument conversion lives here. Integers are checked the same way as in the Python
//! twin: `bool` and non-integers are a `TypeError`, out-of-range values a `ValueError`, both
//! naming the argument, and `extend` checks the whole input before committing any of it.

use numpy::{PyArray1, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList, PyTuple};
use pyo3::{ffi, IntoPyObjectExt};

use super::int_value;
use crate::automaton::{Automaton, Paths};

/// Read every token of `tokens` into `out`, checking each one; nothing is committed here.
fn read_tokens(tokens: &Bound<'_, PyAny>, out: &mut Vec<u32>) -> PyResult<()> {
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
        let name = tokens
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        PyTypeError::new_err(format!("tokens: must be an iterable of ints, got {name}"))
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
    out: &mut Vec<u32>,
) -> PyResult<()> {
    let kind = arr.dtype().kind();
    if kind != b'i' && kind != b'u' {
        let dtype = arr.dtype().str().map(|s| s.to_string()).unwrap_or_default();
        return Err(PyTypeError::new_err(format!(
            "tokens: must be an array of ints, got dtype {dtype}"
        )));
    }
    if arr.ndim() != 1 {
        // Written like Python's tuple repr, as in the twin: (), (2, 3).
        let dims: Vec<String> = arr.shape().iter().map(|d| d.to_string()).collect();
        return Err(PyValueError::new_err(format!(
            "tokens: must be 1-D, got shape ({})",
            dims.join(", ")
        )));
    }
    // One typed path per integer dtype (the array may be non-contiguous).
    macro_rules! typed {
        ($($t:ty),*) => {$(
            if let Ok(a) = tokens.cast::<PyArray1<$t>>() {
                let view = a.readonly();
                for (i, &v) in view.as_array().iter().enumerate() {
                    #[allow(irrefutable_let_patterns)]
                    let Ok(v) = i64::try_from(v) else {
                        // Only uint64 values above 2**63 - 1 get here.
                        return Err(PyValueError::new_err(format!(
                            "tokens: element {i} must be in [0, {}], got {v}",
                            crate::automaton::MAX_TOKEN
                        )));
                    };
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
#[pyclass(name = "Automaton", module = "racer_ref._core")]
pub struct PyAutomaton {
    inner: Automaton,
    /// Reused between calls: the tokens of `extend`, the paths of `retrieve`.
    buf: Vec<u32>,
    paths: Paths,
    /// The Python `int` of each token id below [`INT_CACHE_LIMIT`] that `retrieve` has
    /// returned so far, indexed by id: a path element is then an incref, not a new `int`
    /// (CPython only shares the ints -5..=256). Grown on demand; bounded by one pointer per
    /// id up to the largest id seen (at most 8 * 2**18 bytes = 2 MiB) plus one `int` object
    /// per distinct id seen. Freed with the automaton; `reset` keeps it (the ids stay valid).
    ints: Vec<Option<Py<PyInt>>>,
}

/// Token ids from this one up are converted afresh on each `retrieve` instead of cached
/// (2**18 = 262,144 covers the vocabularies of current models).
const INT_CACHE_LIMIT: usize = 1 << 18;

impl PyAutomaton {
    /// The Python `int` of token id `t` (an owned reference), from the cache when possible.
    fn int<'py>(ints: &mut Vec<Option<Py<PyInt>>>, py: Python<'py>, t: u32) -> Bound<'py, PyAny> {
        let k = t as usize;
        if k >= INT_CACHE_LIMIT {
            return t.into_bound_py_any(py).expect("u32 to int is infallible");
        }
        if k >= ints.len() {
            ints.resize_with(k + 1, || None);
        }
        ints[k]
            .get_or_insert_with(|| PyInt::new(py, t).unbind())
            .bind(py)
            .clone()
            .into_any()
    }

    /// A new list of `n` items (all NULL until set). Errors: `MemoryError`.
    fn new_list(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyList>> {
        // SAFETY: PyList_New returns a new reference or NULL with an exception set; the
        // caller fills every slot with `set` before the list reaches Python code.
        unsafe {
            Ok(
                Bound::from_owned_ptr_or_err(py, ffi::PyList_New(n as ffi::Py_ssize_t))?
                    .cast_into_unchecked(),
            )
        }
    }

    /// Fill slot `i` (< the list's length) of a list made by `new_list`, stealing `item`.
    fn set(list: &Bound<'_, PyList>, i: usize, item: Bound<'_, PyAny>) {
        // SAFETY: `i` is in range and the slot is empty (fresh list), so PyList_SetItem
        // cannot fail; it steals the reference that `into_ptr` hands over.
        unsafe {
            ffi::PyList_SetItem(list.as_ptr(), i as ffi::Py_ssize_t, item.into_ptr());
        }
    }
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
        let get = |v: Option<&Bound<'_, PyAny>>, arg, default| {
            v.map_or(Ok(default), |v| int_value(v, arg, None))
        };
        let ngram = get(ngram, "ngram", 10)?;
        let max_nodes = get(max_nodes, "max_nodes", 10_000)?;
        let min_border_depth = get(min_border_depth, "min_border_depth", 2)?;
        Ok(PyAutomaton {
            inner: Automaton::new(max_nodes, ngram, min_border_depth)?,
            buf: Vec::new(),
            paths: Paths::default(),
            ints: Vec::new(),
        })
    }

    /// Commit tokens (spec step 9): a list, tuple, 1-D integer numpy array or any iterable
    /// of ints in [0, 2**32 - 1]. All are checked before any is committed.
    fn extend(&mut self, tokens: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut buf = std::mem::take(&mut self.buf);
        let read = read_tokens(tokens, &mut buf);
        if read.is_ok() {
            self.inner.extend(&buf);
        }
        self.buf = buf;
        read
    }

    /// The retrieval tree's root-to-leaf paths (spec step 2); at most `capacity` distinct
    /// nodes, root included.
    fn retrieve<'py>(
        &mut self,
        root: &Bound<'py, PyAny>,
        capacity: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let py = root.py();
        let root = Automaton::check_token("root", None, int_value(root, "root", None)?)?;
        let capacity = Automaton::check_capacity(int_value(capacity, "capacity", None)?)?;
        self.inner.retrieve_into(root, capacity, &mut self.paths)?;
        // Pre-sized lists filled in place; the ints come from the per-object cache.
        let p = &self.paths;
        let outer = Self::new_list(py, p.len())?;
        for k in 0..p.len() {
            let path = p.get(k);
            let inner = Self::new_list(py, path.len())?;
            for (i, &t) in path.iter().enumerate() {
                Self::set(&inner, i, Self::int(&mut self.ints, py, t));
            }
            Self::set(&outer, k, inner.into_any());
        }
        Ok(outer)
    }

    /// The borders for `root`, longest first, each as its token string (a suffix of the
    /// committed tokens, then `root`).
    fn borders(&mut self, root: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<u32>>> {
        let root = Automaton::check_token("root", None, int_value(root, "root", None)?)?;
        let states = self.inner.borders(root);
        Ok(states.into_iter().map(|s| self.inner.path(s)).collect())
    }

    /// Forget everything (trie, windows, matching state, counters).
    fn reset(&mut self) {
        self.inner.reset();
    }

    /// Trie nodes in use, the root excluded.
    fn len(&self) -> usize {
        self.inner.len()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Counters and sizes as a dict of ints.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("nodes", self.inner.len())?;
        d.set_item("max_nodes", self.inner.max_nodes())?;
        d.set_item("ngram", self.inner.ngram())?;
        d.set_item("min_border_depth", self.inner.min_border_depth())?;
        d.set_item("committed_tokens", s.committed_tokens)?;
        d.set_item("inserts", s.inserts)?;
        d.set_item("evictions", s.evictions)?;
        d.set_item("retrieves", s.retrieves)?;
        d.set_item("fail_hits", s.fail_hits)?;
        d.set_item("fail_misses", s.fail_misses)?;
        d.set_item(
            "matching_depth",
            self.inner.depth(self.inner.matching_state()),
        )?;
        Ok(d)
    }

    /// Canonical text of the whole automaton (identical to the Python twin's).
    fn dump(&mut self) -> String {
        self.inner.dump()
    }

    #[getter]
    fn max_nodes(&self) -> usize {
        self.inner.max_nodes()
    }

    #[getter]
    fn ngram(&self) -> usize {
        self.inner.ngram()
    }

    #[getter]
    fn min_border_depth(&self) -> usize {
        self.inner.min_border_depth()
    }

    fn __repr__(&self) -> String {
        format!(
            "Automaton(max_nodes={}, ngram={}, min_border_depth={}) with {} nodes",
            self.inner.max_nodes(),
            self.inner.ngram(),
            self.inner.min_border_depth(),
            self.inner.len()
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAutomaton>()?;
    Ok(())
}

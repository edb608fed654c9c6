//! PyO3 wrappers for the drafting side: `CopyLogitTable`, `build_draft_tree` and `Drafter`.
//!
//! Arguments arrive as numpy arrays (any integer dtype, any layout), lists or anything
//! `numpy.asarray` understands; a C-contiguous int64 array is read in place, without a
//! copy. A draft tree leaves as a tuple of six new numpy arrays; `racer_ref.Drafter`
//! wraps the tuple into a `DraftTree`.

use numpy::ndarray::ArrayView2;
use numpy::{
    PyArray1, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArray,
    PyUntypedArrayMethods, ToPyArray,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyString, PyTuple};

use super::int_value;

use crate::copy_logit::CopyLogitTable;
use crate::draft_tree::{FlatTree, TreeBuilder, MAX_CAPACITY};
use crate::drafter::{Drafter, DrafterConfig, Method};

static ASARRAY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Python-style tuple text of a shape: `(3,)`, `(2, 4)`.
fn fmt_shape(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// An integer array argument seen as `i64` values: borrowed from numpy when the input is
/// already a C-contiguous int64 array, copied otherwise.
struct IntArg<'py> {
    shape: Vec<usize>,
    borrowed: Option<PyReadonlyArrayDyn<'py, i64>>,
    owned: Vec<i64>,
}

impl IntArg<'_> {
    fn values(&self) -> &[i64] {
        match &self.borrowed {
            // `borrowed` is only kept when `as_slice` succeeds.
            Some(b) => b.as_slice().unwrap_or(&[]),
            None => &self.owned,
        }
    }
}

/// Convert `obj` to an integer array with `ndim` dimensions. Errors: `ValueError` for the
/// wrong number of dimensions, `TypeError` for a non-integer dtype (an empty input passes:
/// `[]` is float64 in numpy).
fn int_array<'py>(obj: &Bound<'py, PyAny>, arg: &str, ndim: usize) -> PyResult<IntArg<'py>> {
    let py = obj.py();
    let arr: Bound<'py, PyUntypedArray> = match obj.cast::<PyUntypedArray>() {
        Ok(a) => a.clone(),
        Err(_) => {
            let asarray = ASARRAY.import(py, "numpy", "asarray")?;
            // numpy refuses ragged nesting with a ValueError that names no argument.
            asarray
                .call1((obj,))
                .map_err(|e| {
                    if e.is_instance_of::<PyValueError>(py) {
                        PyValueError::new_err(format!(
                            "{arg}: not an array of ids ({})",
                            e.value(py)
                        ))
                    } else {
                        e
                    }
                })?
                .cast_into::<PyUntypedArray>()
                .map_err(|_| PyTypeError::new_err(format!("{arg}: expected an integer array")))?
        }
    };
    let shape = arr.shape().to_vec();
    if shape.len() != ndim {
        return Err(PyValueError::new_err(format!(
            "{arg}: expected a {ndim}-D array, got shape {}",
            fmt_shape(&shape)
        )));
    }
    let dtype = arr.dtype();
    let kind = dtype.kind();
    if !arr.is_empty() && kind != b'i' && kind != b'u' {
        return Err(PyTypeError::new_err(format!(
            "{arg}: expected integer token ids, got dtype {dtype}"
        )));
    }
    // uint64 values above i64::MAX would wrap to negative ids in a cast; they are outside
    // every vocabulary, so they saturate to i64::MAX and are reported as out of range.
    if kind == b'u' && dtype.itemsize() == 8 {
        // Either byte order: a non-native array is converted to native uint64 first.
        let a = match arr.cast::<PyArrayDyn<u64>>() {
            Ok(a) => a.clone(),
            Err(_) => arr
                .call_method1("astype", ("uint64",))?
                .cast_into::<PyArrayDyn<u64>>()?,
        };
        let owned = a
            .try_readonly()?
            .as_array()
            .iter()
            .map(|&v| i64::try_from(v).unwrap_or(i64::MAX))
            .collect();
        return Ok(IntArg {
            shape,
            borrowed: None,
            owned,
        });
    }
    // int64 arrays are read as they are; other integer dtypes (and empty float arrays) are
    // converted once by numpy.
    let arr64: Bound<'py, PyArrayDyn<i64>> = match arr.cast::<PyArrayDyn<i64>>() {
        Ok(a) => a.clone(),
        Err(_) => arr
            .call_method1("astype", ("int64",))?
            .cast_into::<PyArrayDyn<i64>>()?,
    };
    let ro = arr64.try_readonly()?;
    // `as_slice` also accepts Fortran order; the core wants row-major values.
    if arr64.is_c_contiguous() && ro.as_slice().is_ok() {
        Ok(IntArg {
            shape,
            borrowed: Some(ro),
            owned: Vec::new(),
        })
    } else {
        let owned = ro.as_array().iter().copied().collect();
        Ok(IntArg {
            shape,
            borrowed: None,
            owned,
        })
    }
}

/// The six arrays of a `DraftTree`, in field order: tokens, parents, depths,
/// attention_mask, retrieve_indices, sources. Each is a fresh numpy array with the values
/// copied in (for arrays this small one copy is cheaper than handing over a Rust buffer,
/// and it lets the builder reuse its buffers).
fn tree_to_py<'py>(py: Python<'py>, f: &FlatTree) -> PyResult<Bound<'py, PyTuple>> {
    let n = f.len();
    let shape_error = |e: numpy::ndarray::ShapeError| PyValueError::new_err(e.to_string());
    let mask = ArrayView2::from_shape((n, n), &f.attention_mask).map_err(shape_error)?;
    let ri = ArrayView2::from_shape((f.num_leaves, f.width), &f.retrieve_indices)
        .map_err(shape_error)?;
    PyTuple::new(
        py,
        [
            PyArray1::from_slice(py, &f.tokens).into_any(),
            PyArray1::from_slice(py, &f.parents).into_any(),
            PyArray1::from_slice(py, &f.depths).into_any(),
            mask.to_pyarray(py).into_any(),
            ri.to_pyarray(py).into_any(),
            PyArray1::from_slice(py, &f.sources).into_any(),
        ],
    )
}

/// `(token_ids, topk_ids)` of an observe call, converted and shape-checked for rank.
fn observe_args<'py>(
    token_ids: &Bound<'py, PyAny>,
    topk_ids: &Bound<'py, PyAny>,
) -> PyResult<(IntArg<'py>, IntArg<'py>)> {
    let tokens = int_array(token_ids, "token_ids", 1)?;
    let topk = int_array(topk_ids, "topk_ids", 2)?;
    Ok((tokens, topk))
}

/// The `token` argument of a row lookup: an int (`TypeError` otherwise); `None` when it
/// cannot be a row (negative or beyond u32), which reads as an empty row.
fn row_index(token: &Bound<'_, PyAny>) -> PyResult<Option<u32>> {
    Ok(u32::try_from(int_value(token, "token", None)?).ok())
}

/// Dense `[vocab_size, k]` copy-logit table (racer-spec.md step 8). See
/// `racer_ref.reference.CopyLogitTable` for the documented twin.
#[pyclass(name = "CopyLogitTable", module = "racer_ref._core")]
pub struct PyCopyLogitTable {
    inner: CopyLogitTable,
}

#[pymethods]
impl PyCopyLogitTable {
    #[new]
    fn new(vocab_size: &Bound<'_, PyAny>, k: &Bound<'_, PyAny>) -> PyResult<Self> {
        let vocab_size = int_value(vocab_size, "vocab_size", None)?;
        let k = int_value(k, "breadth", None)?;
        Ok(PyCopyLogitTable {
            inner: CopyLogitTable::new(vocab_size, k)?,
        })
    }

    /// Number of token ids (rows).
    #[getter]
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    /// Ids kept per row.
    #[getter]
    fn k(&self) -> usize {
        self.inner.k()
    }

    /// Rows written since the last reset.
    #[getter]
    fn num_seen(&self) -> usize {
        self.inner.num_seen()
    }

    /// Write `table[token_ids[i]] = topk_ids[i, :k]`; see the twin's docstring.
    fn observe(
        &mut self,
        token_ids: &Bound<'_, PyAny>,
        topk_ids: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (tokens, topk) = observe_args(token_ids, topk_ids)?;
        let shape = [topk.shape[0], topk.shape[1]];
        Ok(self.inner.observe(tokens.values(), topk.values(), shape)?)
    }

    /// Row `token` as a list (empty if never seen or outside the vocabulary).
    fn row(&self, token: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
        Ok(match row_index(token)? {
            Some(t) => self.inner.row(t).to_vec(),
            None => Vec::new(),
        })
    }

    /// Whether row `token` has been written.
    fn is_seen(&self, token: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(row_index(token)?.is_some_and(|t| self.inner.is_seen(t)))
    }

    /// Forget every row.
    fn reset(&mut self) {
        self.inner.reset();
    }

    fn __repr__(&self) -> String {
        format!(
            "CopyLogitTable(vocab_size={}, k={}, num_seen={})",
            self.inner.vocab_size(),
            self.inner.k(),
            self.inner.num_seen()
        )
    }
}

/// Build one draft tree (spec steps 2-4) from retrieval paths and an optional copy-logit
/// table; returns the six `DraftTree` arrays. See `racer_ref.reference.build_draft_tree`.
#[pyfunction]
#[pyo3(signature = (root, capacity, retrieval_paths=None, table=None, root_topk=None))]
fn build_draft_tree<'py>(
    py: Python<'py>,
    root: &Bound<'py, PyAny>,
    capacity: &Bound<'py, PyAny>,
    retrieval_paths: Option<&Bound<'py, PyAny>>,
    table: Option<PyRef<'py, PyCopyLogitTable>>,
    root_topk: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let tab = table.as_ref().map(|t| &t.inner);
    // Token ids: [0, vocab_size) with a table, the u32 range without one.
    let high = tab.map_or(u32::MAX as i64 + 1, |t| t.vocab_size() as i64);
    let check = |arg: &str, v: i64| -> PyResult<u32> {
        if (0..high).contains(&v) {
            Ok(v as u32)
        } else {
            Err(PyValueError::new_err(format!(
                "{arg}: token id {v} is outside [0, {high})"
            )))
        }
    };
    let root = check("root", int_value(root, "root", None)?)?;
    let capacity = crate::draft_tree::check_capacity(int_value(capacity, "capacity", None)?)?;
    let mut paths: Vec<Vec<u32>> = Vec::new();
    if let Some(rp) = retrieval_paths {
        for p in rp.try_iter()? {
            let p = p?;
            let mut path = Vec::new();
            for t in p.try_iter()? {
                path.push(check(
                    "retrieval_paths",
                    int_value(&t?, "retrieval_paths", None)?,
                )?);
            }
            paths.push(path);
        }
    }
    let mut topk: Option<Vec<u32>> = None;
    if let (Some(rt), Some(_)) = (root_topk, tab) {
        let arr = int_array(rt, "last_topk", 1)?;
        let ids = arr
            .values()
            .iter()
            .map(|&v| check("last_topk", v))
            .collect::<PyResult<_>>()?;
        topk = Some(ids);
    }
    let mut builder = TreeBuilder::new();
    let flat = builder.build(root, capacity, &paths, tab, topk.as_deref())?;
    tree_to_py(py, flat)
}

/// One drafter per method (`racer`, `retrieval`, `logits`, `logits-last`, `pld`, `ar`).
/// `racer_ref.Drafter(backend="rust")` wraps it; see that class for the documentation.
#[pyclass(name = "Drafter", module = "racer_ref._core")]
pub struct PyDrafter {
    inner: Drafter,
}

#[pymethods]
impl PyDrafter {
    /// Kinds first (method a str, every size an int, `TypeError`), then ranges
    /// (`ValueError`), in the twin's order. `None` for an argument means its default, as
    /// in `Automaton` (`vocab_size` has none: it is required).
    #[new]
    #[pyo3(signature = (method=None, vocab_size=None, capacity=None, breadth=None, ngram=None,
                        max_nodes=None, min_border_depth=None))]
    #[pyo3(
        text_signature = "(method='racer', vocab_size=None, capacity=64, breadth=8, \
                             ngram=10, max_nodes=10000, min_border_depth=2)"
    )]
    fn new(
        method: Option<&Bound<'_, PyAny>>,
        vocab_size: Option<&Bound<'_, PyAny>>,
        capacity: Option<&Bound<'_, PyAny>>,
        breadth: Option<&Bound<'_, PyAny>>,
        ngram: Option<&Bound<'_, PyAny>>,
        max_nodes: Option<&Bound<'_, PyAny>>,
        min_border_depth: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let method: Method = match method {
            None => Method::Racer,
            Some(m) => match m.cast::<PyString>() {
                Ok(name) => name.to_cow()?.parse()?,
                Err(_) => {
                    let name = m.get_type().name()?;
                    return Err(PyTypeError::new_err(format!(
                        "method: must be a str, got {name}"
                    )));
                }
            },
        };
        let vocab_size = match vocab_size {
            Some(v) if !v.is_none() => int_value(v, "vocab_size", None)?,
            _ => {
                return Err(PyTypeError::new_err(
                    "vocab_size: required (the target model's vocabulary size)",
                ))
            }
        };
        let get = |v: Option<&Bound<'_, PyAny>>, arg, default| {
            v.map_or(Ok(default), |v| int_value(v, arg, None))
        };
        let defaults = DrafterConfig::new(method, vocab_size);
        let config = DrafterConfig {
            capacity: get(capacity, "capacity", defaults.capacity)?,
            breadth: get(breadth, "breadth", defaults.breadth)?,
            ngram: get(ngram, "ngram", defaults.ngram)?,
            max_nodes: get(max_nodes, "max_nodes", defaults.max_nodes)?,
            min_border_depth: get(
                min_border_depth,
                "min_border_depth",
                defaults.min_border_depth,
            )?,
            ..defaults
        };
        Ok(PyDrafter {
            inner: Drafter::new(config)?,
        })
    }

    /// The method name.
    #[getter]
    fn method(&self) -> &'static str {
        self.inner.config().method.name()
    }

    #[getter]
    fn vocab_size(&self) -> i64 {
        self.inner.config().vocab_size
    }

    #[getter]
    fn capacity(&self) -> i64 {
        self.inner.config().capacity
    }

    #[getter]
    fn breadth(&self) -> i64 {
        self.inner.config().breadth
    }

    #[getter]
    fn ngram(&self) -> i64 {
        self.inner.config().ngram
    }

    #[getter]
    fn max_nodes(&self) -> i64 {
        self.inner.config().max_nodes
    }

    /// Tokens committed since the last reset.
    #[getter]
    fn num_committed(&self) -> usize {
        self.inner.num_committed()
    }

    /// Trie nodes in the drafter's automaton (root excluded); 0 without an automaton.
    #[getter]
    fn automaton_nodes(&self) -> usize {
        self.inner.automaton().map_or(0, |a| a.len())
    }

    /// Copy-logit update: `token_ids` (n,) ints, `topk_ids` (n, k' >= breadth) ints.
    fn observe(
        &mut self,
        token_ids: &Bound<'_, PyAny>,
        topk_ids: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (tokens, topk) = observe_args(token_ids, topk_ids)?;
        let shape = [topk.shape[0], topk.shape[1]];
        Ok(self.inner.observe(tokens.values(), topk.values(), shape)?)
    }

    /// Commit output tokens: `token_ids` (n,) ints.
    fn commit(&mut self, token_ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let tokens = int_array(token_ids, "token_ids", 1)?;
        Ok(self.inner.commit(tokens.values())?)
    }

    /// Build this step's draft tree; returns the six `DraftTree` arrays as a tuple.
    #[pyo3(signature = (root, last_topk=None))]
    fn draft<'py>(
        &mut self,
        py: Python<'py>,
        root: &Bound<'py, PyAny>,
        last_topk: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let root = int_value(root, "root", None)?;
        let flat = match last_topk {
            Some(rt) => {
                let arr = int_array(rt, "last_topk", 1)?;
                self.inner.draft(root, Some(arr.values()))?
            }
            None => self.inner.draft(root, None)?,
        };
        tree_to_py(py, flat)
    }

    /// Copy-logit row of `token` (empty when unseen or when the method has no table).
    fn table_row<'py>(
        &self,
        py: Python<'py>,
        token: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let row: &[u32] = match (self.inner.table(), row_index(token)?) {
            (Some(t), Some(tok)) => t.row(tok),
            _ => &[],
        };
        PyList::new(py, row)
    }

    /// Forget the automaton, the copy-logit table and the history.
    fn reset(&mut self) {
        self.inner.reset();
    }

    fn __repr__(&self) -> String {
        let c = self.inner.config();
        format!(
            "Drafter(method='{}', vocab_size={}, capacity={}, breadth={}, ngram={}, max_nodes={})",
            c.method.name(),
            c.vocab_size,
            c.capacity,
            c.breadth,
            c.ngram,
            c.max_nodes
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCopyLogitTable>()?;
    m.add_class::<PyDrafter>()?;
    m.add_function(wrap_pyfunction!(build_draft_tree, m)?)?;
    m.add("MAX_CAPACITY", MAX_CAPACITY)?;
    Ok(())
}

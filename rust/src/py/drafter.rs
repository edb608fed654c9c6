//! PyO3 wrappers for the drafting side: `CopyLogitTable`, `build_draft_tree` and `Drafter`.
//!
//! Arguments arrive as numpy arrays (any integer dtype, any layout), lists or anything
//! `numpy.asarray` understands; a C-contiguous int64 array is read in place, without a
//! copy. A draft tree leaves as a tuple of six new numpy arrays; `racer_ref.Drafter`
//! wraps the tuple into a `DraftTree`.

use std::sync::Mutex;

use numpy::ndarray::ArrayView2;
use numpy::{
    PyArray1, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArray,
    PyUntypedArrayMethods, ToPyArray,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyString, PyTuple};

use super::{int_or_default, int_value, lock, refuse_copy, type_name};

use crate::copy_logit::{check_observe, CopyLogitTable};
use crate::draft_tree::{check_tree_token, FlatTree, TreeBuilder};
use crate::drafter::{Drafter, DrafterConfig, Method, TreeKind};
use crate::error::Error;
use crate::{check_capacity, TokenId, MAX_CAPACITY};

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
pub(super) struct IntArg<'py> {
    shape: Vec<usize>,
    borrowed: Option<PyReadonlyArrayDyn<'py, i64>>,
    owned: Vec<i64>,
}

impl IntArg<'_> {
    pub(super) fn values(&self) -> &[i64] {
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
pub(super) fn int_array<'py>(
    obj: &Bound<'py, PyAny>,
    arg: &'static str,
    ndim: usize,
) -> PyResult<IntArg<'py>> {
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
                        let msg = format!("not an array of ids ({})", e.value(py));
                        Error::value(arg, msg).into()
                    } else {
                        e
                    }
                })?
                .cast_into::<PyUntypedArray>()
                .map_err(|_| Error::type_(arg, "expected an integer array"))?
        }
    };
    let shape = arr.shape().to_vec();
    if shape.len() != ndim {
        let msg = format!("expected a {ndim}-D array, got shape {}", fmt_shape(&shape));
        return Err(Error::value(arg, msg).into());
    }
    let dtype = arr.dtype();
    let kind = dtype.kind();
    if !arr.is_empty() && kind != b'i' && kind != b'u' {
        let msg = format!("expected integer token ids, got dtype {dtype}");
        return Err(Error::type_(arg, msg).into());
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

/// The six fields of a `DraftTree`, in order: tokens, parents, depths, attention_mask,
/// retrieve_indices, sources. Each array is a fresh numpy array with the values copied in
/// (for arrays this small one copy is cheaper than handing over a Rust buffer, and it
/// lets the builder reuse its buffers). `retrieve_indices` is `None`: the loop never
/// reads it, and `DraftTree` computes it on first read.
fn tree_to_py<'py>(py: Python<'py>, f: &FlatTree) -> PyResult<Bound<'py, PyTuple>> {
    let n = f.len();
    let shape_error = |e: numpy::ndarray::ShapeError| PyValueError::new_err(e.to_string());
    let mask = ArrayView2::from_shape((n, n), &f.attention_mask).map_err(shape_error)?;
    PyTuple::new(
        py,
        [
            // int64, as the twin's DraftTree (token ids are u32 in the core).
            PyArray1::from_iter(py, f.tokens.iter().map(|&t| i64::from(t))).into_any(),
            PyArray1::from_slice(py, &f.parents).into_any(),
            PyArray1::from_slice(py, &f.depths).into_any(),
            mask.to_pyarray(py).into_any(),
            py.None().into_bound(py),
            PyArray1::from_slice(py, &f.sources).into_any(),
        ],
    )
}

/// Token ids the core's checks accepted (all in `[0, vocab_size)`), as [`TokenId`]s. The
/// top-k columns past `k` are never read; their values may wrap.
fn checked_ids(values: &[i64]) -> Vec<TokenId> {
    values.iter().map(|&v| v as TokenId).collect()
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
fn row_index(token: &Bound<'_, PyAny>) -> PyResult<Option<TokenId>> {
    Ok(TokenId::try_from(int_value(token, "token", None)?).ok())
}

/// Dense `[vocab_size, k]` copy-logit table (step 8). See
/// `racer_ref.reference.CopyLogitTable` for the documented twin.
#[pyclass(name = "CopyLogitTable", module = "racer_ref._core", frozen)]
pub struct PyCopyLogitTable {
    /// The core table, one call at a time (see [`lock`]).
    inner: Mutex<CopyLogitTable>,
    // The sizes never change: read without the lock.
    vocab_size: usize,
    k: usize,
}

impl PyCopyLogitTable {
    fn table(&self) -> PyResult<std::sync::MutexGuard<'_, CopyLogitTable>> {
        lock(&self.inner, "CopyLogitTable")
    }
}

#[pymethods]
impl PyCopyLogitTable {
    #[new]
    fn new(vocab_size: &Bound<'_, PyAny>, k: &Bound<'_, PyAny>) -> PyResult<Self> {
        let vocab_size = int_value(vocab_size, "vocab_size", None)?;
        let k = int_value(k, "k", None)?;
        let table = CopyLogitTable::new(vocab_size, k)?;
        Ok(PyCopyLogitTable {
            vocab_size: table.vocab_size(),
            k: table.k(),
            inner: Mutex::new(table),
        })
    }

    /// Number of token ids (rows).
    #[getter]
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Ids kept per row.
    #[getter]
    fn k(&self) -> usize {
        self.k
    }

    /// Rows written since the last reset.
    #[getter]
    fn num_seen(&self) -> PyResult<usize> {
        Ok(self.table()?.num_seen())
    }

    /// Write `table[token_ids[i]] = topk_ids[i, :k]`; see the twin's docstring.
    fn observe(&self, token_ids: &Bound<'_, PyAny>, topk_ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let (tokens, topk) = observe_args(token_ids, topk_ids)?;
        let shape = [topk.shape[0], topk.shape[1]];
        let mut table = self.table()?;
        // Checked once, on the values as Python gave them (negative ones included).
        check_observe(
            tokens.values(),
            topk.values(),
            shape,
            table.vocab_size(),
            table.k(),
        )?;
        let (tokens, topk) = (checked_ids(tokens.values()), checked_ids(topk.values()));
        table.observe_trusted(&tokens, &topk, shape);
        Ok(())
    }

    /// Row `token` as a list (empty if never seen or outside the vocabulary).
    fn row(&self, token: &Bound<'_, PyAny>) -> PyResult<Vec<TokenId>> {
        Ok(match row_index(token)? {
            Some(t) => self.table()?.row(t).to_vec(),
            None => Vec::new(),
        })
    }

    /// Whether row `token` has been written.
    fn is_seen(&self, token: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(match row_index(token)? {
            Some(t) => self.table()?.is_seen(t),
            None => false,
        })
    }

    /// Forget every row.
    fn reset(&self) -> PyResult<()> {
        self.table()?.reset();
        Ok(())
    }

    /// `pickle`, `copy.copy` and `copy.deepcopy` (which fall back to this method) are
    /// refused (see [`super::refuse_copy`]).
    fn __reduce_ex__(&self, _protocol: &Bound<'_, PyAny>) -> PyResult<()> {
        Err(refuse_copy("CopyLogitTable"))
    }

    fn __repr__(&self) -> String {
        let seen = match self.inner.try_lock() {
            Ok(t) => t.num_seen().to_string(),
            Err(_) => "(in use)".to_string(),
        };
        format!(
            "CopyLogitTable(vocab_size={}, k={}, num_seen={seen})",
            self.vocab_size, self.k
        )
    }
}

/// Build one draft tree (steps 2-4) from retrieval paths and an optional copy-logit
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
    // The table is locked for the whole build: its rows are read by the logits tree.
    let guard = table.as_ref().map(|t| t.table()).transpose()?;
    let tab = guard.as_deref();
    // Token ids: [0, vocab_size) with a table, the u32 range without one (the core's
    // check). Read and checked one by one, in the twin's order.
    let vocab = tab.map(CopyLogitTable::vocab_size);
    let token = |arg: &'static str, obj: &Bound<'py, PyAny>| -> PyResult<TokenId> {
        Ok(check_tree_token(arg, int_value(obj, arg, None)?, vocab)?)
    };
    let root = token("root", root)?;
    let capacity = check_capacity(int_value(capacity, "capacity", None)?)?;
    let mut paths: Vec<Vec<TokenId>> = Vec::new();
    if let Some(rp) = retrieval_paths {
        for p in rp.try_iter()? {
            let path = p?
                .try_iter()?
                .map(|t| token("retrieval_paths", &t?))
                .collect::<PyResult<_>>()?;
            paths.push(path);
        }
    }
    // root_topk is read only with a table (without one there is no logits tree).
    let mut topk: Option<Vec<TokenId>> = None;
    if let (Some(rt), Some(_)) = (root_topk, tab) {
        let arr = int_array(rt, "root_topk", 1)?;
        let ids = arr
            .values()
            .iter()
            .map(|&v| Ok(check_tree_token("root_topk", v, vocab)?))
            .collect::<PyResult<_>>()?;
        topk = Some(ids);
    }
    let mut builder = TreeBuilder::new();
    let flat = builder.build(root, capacity, &paths, tab, topk.as_deref())?;
    tree_to_py(py, flat)
}

/// One drafter per method (`racer`, `retrieval`, `logits`, `logits-last`, `pld`, `ar`).
/// `racer_ref.Drafter(backend="rust")` wraps it; see that class for the documentation.
#[pyclass(name = "Drafter", module = "racer_ref._core", frozen)]
pub struct PyDrafter {
    /// The core drafter, one call at a time (see [`lock`]).
    inner: Mutex<Drafter>,
    /// Its configuration, which never changes: read without the lock.
    config: DrafterConfig,
}

impl PyDrafter {
    fn drafter(&self) -> PyResult<std::sync::MutexGuard<'_, Drafter>> {
        lock(&self.inner, "Drafter")
    }
}

#[pymethods]
impl PyDrafter {
    /// Kinds first (method a str, every size an int, `TypeError`), then ranges
    /// (`ValueError`, checked by the core), in the twin's order. `None` for an argument
    /// means its default, as in `Automaton` (`vocab_size` has none: it is required).
    #[new]
    #[pyo3(signature = (method=None, vocab_size=None, capacity=None, breadth=None, ngram=None,
                        max_nodes=None, min_border_depth=None, tree=None))]
    #[pyo3(
        text_signature = "(method='racer', vocab_size=None, capacity=64, breadth=8, \
                             ngram=10, max_nodes=10000, min_border_depth=2, tree='paper')"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        method: Option<&Bound<'_, PyAny>>,
        vocab_size: Option<&Bound<'_, PyAny>>,
        capacity: Option<&Bound<'_, PyAny>>,
        breadth: Option<&Bound<'_, PyAny>>,
        ngram: Option<&Bound<'_, PyAny>>,
        max_nodes: Option<&Bound<'_, PyAny>>,
        min_border_depth: Option<&Bound<'_, PyAny>>,
        tree: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let method: Method = match method {
            None => Method::Racer,
            Some(m) => match m.cast::<PyString>() {
                Ok(name) => name.to_cow()?.parse()?,
                Err(_) => {
                    let msg = format!("must be a str, got {}", type_name(m));
                    return Err(Error::type_("method", msg).into());
                }
            },
        };
        let vocab_size = match vocab_size {
            Some(v) if !v.is_none() => int_value(v, "vocab_size", None)?,
            _ => {
                let msg = "required (the target model's vocabulary size)";
                return Err(Error::type_("vocab_size", msg).into());
            }
        };
        let defaults = DrafterConfig::new(method, vocab_size);
        // Checked after the sizes' kinds, as in the twin.
        let tree_obj = tree;
        let config = DrafterConfig {
            capacity: int_or_default(capacity, "capacity", defaults.capacity)?,
            breadth: int_or_default(breadth, "breadth", defaults.breadth)?,
            ngram: int_or_default(ngram, "ngram", defaults.ngram)?,
            max_nodes: int_or_default(max_nodes, "max_nodes", defaults.max_nodes)?,
            min_border_depth: int_or_default(
                min_border_depth,
                "min_border_depth",
                defaults.min_border_depth,
            )?,
            ..defaults
        };
        let tree: TreeKind = match tree_obj {
            Some(t) if !t.is_none() => match t.cast::<PyString>() {
                Ok(name) => name.to_cow()?.parse()?,
                Err(_) => {
                    let msg = format!("must be a str, got {}", type_name(t));
                    return Err(Error::type_("tree", msg).into());
                }
            },
            _ => TreeKind::Paper,
        };
        let config = DrafterConfig { tree, ..config };
        Ok(PyDrafter {
            inner: Mutex::new(Drafter::new(config.clone())?),
            config,
        })
    }

    /// The method name.
    #[getter]
    fn method(&self) -> &'static str {
        self.config.method.name()
    }

    #[getter]
    fn vocab_size(&self) -> i64 {
        self.config.vocab_size
    }

    #[getter]
    fn capacity(&self) -> i64 {
        self.config.capacity
    }

    #[getter]
    fn breadth(&self) -> i64 {
        self.config.breadth
    }

    #[getter]
    fn ngram(&self) -> i64 {
        self.config.ngram
    }

    #[getter]
    fn max_nodes(&self) -> i64 {
        self.config.max_nodes
    }

    /// `"expected"` or `"paper"`.
    #[getter]
    fn tree(&self) -> &'static str {
        self.config.tree.name()
    }

    /// `(n,)` float64 path probabilities of the last draft's nodes, or None.
    #[getter]
    fn path_probs<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyArray1<f64>>>> {
        let d = self.drafter()?;
        let last = d.estimator().and_then(|e| e.last_annotation());
        Ok(last.map(|a| PyArray1::from_slice(py, &a.path)))
    }

    /// `E[a + 1]` of the last draft, or None.
    #[getter]
    fn expected_tokens(&self) -> PyResult<Option<f64>> {
        let d = self.drafter()?;
        let last = d.estimator().and_then(|e| e.last_annotation());
        Ok(last.map(|a| a.expected_tokens()))
    }

    /// Attach the acceptance estimates (see the core's `Drafter::attach_estimator`).
    fn attach_estimator(&self) -> PyResult<()> {
        self.drafter()?.attach_estimator();
        Ok(())
    }

    /// The estimates' counts and calibration record, as a dict of lists; None when no
    /// estimates are attached.
    fn acceptance_stats<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
        let d = self.drafter()?;
        let Some(e) = d.estimator().map(|e| e.estimates()) else {
            return Ok(None);
        };
        let out = pyo3::types::PyDict::new(py);
        out.set_item("seen", e.seen.to_vec())?;
        out.set_item("accepted", e.accepted.to_vec())?;
        out.set_item("calibration_seen", e.calibration_seen.to_vec())?;
        out.set_item("calibration_accepted", e.calibration_accepted.to_vec())?;
        out.set_item("calibration_predicted", e.calibration_predicted.to_vec())?;
        out.set_item("num_labels", e.num_labels)?;
        Ok(Some(out))
    }

    /// Tokens committed since the last reset.
    #[getter]
    fn num_committed(&self) -> PyResult<usize> {
        Ok(self.drafter()?.num_committed())
    }

    /// Trie nodes in the drafter's automaton (root excluded); 0 without an automaton.
    #[getter]
    fn automaton_nodes(&self) -> PyResult<usize> {
        Ok(self.drafter()?.automaton().map_or(0, |a| a.len()))
    }

    /// Copy-logit update: `token_ids` (n,) ints, `topk_ids` (n, k' >= breadth) ints.
    fn observe(&self, token_ids: &Bound<'_, PyAny>, topk_ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let (tokens, topk) = observe_args(token_ids, topk_ids)?;
        let shape = [topk.shape[0], topk.shape[1]];
        let mut drafter = self.drafter()?;
        // Checked once, on the values as Python gave them (negative ones included).
        drafter.check_observe(tokens.values(), topk.values(), shape)?;
        let (tokens, topk) = (checked_ids(tokens.values()), checked_ids(topk.values()));
        drafter.observe_trusted(&tokens, &topk, shape);
        Ok(())
    }

    /// Commit output tokens: `token_ids` (n,) ints.
    fn commit(&self, token_ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let tokens = int_array(token_ids, "token_ids", 1)?;
        let mut drafter = self.drafter()?;
        drafter.check_commit(tokens.values())?;
        drafter.commit_trusted(&checked_ids(tokens.values()));
        Ok(())
    }

    /// Build this step's draft tree; returns the six `DraftTree` arrays as a tuple.
    #[pyo3(signature = (root, last_topk=None, capacity=None))]
    fn draft<'py>(
        &self,
        py: Python<'py>,
        root: &Bound<'py, PyAny>,
        last_topk: Option<&Bound<'py, PyAny>>,
        capacity: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let root = int_value(root, "root", None)?;
        let capacity = match capacity {
            Some(c) if !c.is_none() => Some(int_value(c, "capacity", None)?),
            _ => None,
        };
        let last_topk = last_topk
            .map(|rt| int_array(rt, "last_topk", 1))
            .transpose()?;
        let mut drafter = self.drafter()?;
        let last_topk = last_topk.as_ref().map(IntArg::values);
        let (root, capacity) = drafter.check_draft(root, last_topk, capacity)?;
        let last_topk = last_topk.map(checked_ids);
        let flat = drafter.draft_trusted(root, last_topk.as_deref(), capacity)?;
        tree_to_py(py, flat)
    }

    /// Copy-logit row of `token` (empty when unseen or when the method has no table).
    fn table_row<'py>(
        &self,
        py: Python<'py>,
        token: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let token = row_index(token)?;
        let drafter = self.drafter()?;
        let row: &[TokenId] = match (drafter.table(), token) {
            (Some(t), Some(tok)) => t.row(tok),
            _ => &[],
        };
        PyList::new(py, row)
    }

    /// Forget the automaton, the copy-logit table and the history.
    fn reset(&self) -> PyResult<()> {
        self.drafter()?.reset();
        Ok(())
    }

    /// `pickle`, `copy.copy` and `copy.deepcopy` (which fall back to this method) are
    /// refused (see [`super::refuse_copy`]).
    fn __reduce_ex__(&self, _protocol: &Bound<'_, PyAny>) -> PyResult<()> {
        Err(refuse_copy("Drafter"))
    }

    fn __repr__(&self) -> String {
        let c = &self.config;
        format!(
            "Drafter(method='{}', vocab_size={}, capacity={}, breadth={}, ngram={}, max_nodes={}, tree='{}')",
            c.method.name(),
            c.vocab_size,
            c.capacity,
            c.breadth,
            c.ngram,
            c.max_nodes,
            c.tree.name()
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

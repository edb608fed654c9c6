//! PyO3 wrapper of [`crate::chain::best_chain`]: `racer_ref._core.best_chain`.

use numpy::PyArray1;
use pyo3::prelude::*;

use super::drafter::int_array;
use super::int_value;

use crate::chain;
use crate::error::Error;

/// The node indices of the first-child path of a draft tree, at most `length` of them
/// (root excluded). Twin: `racer_ref.reference.chain.best_chain`.
#[pyfunction]
fn best_chain<'py>(
    py: Python<'py>,
    parents: &Bound<'py, PyAny>,
    length: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let parents = int_array(parents, "parents", 1)?;
    let length = int_value(length, "length", None)?;
    if length < 0 {
        return Err(Error::value("length", format!("must be >= 0, got {length}")).into());
    }
    let nodes = chain::best_chain(parents.values(), length as usize)?;
    let nodes: Vec<i64> = nodes.into_iter().map(i64::from).collect();
    Ok(PyArray1::from_vec(py, nodes))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(best_chain, m)?)?;
    Ok(())
}

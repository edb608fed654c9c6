//! PyO3 wrapper for `crate::automaton::Automaton` (to be written).
use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}

//! The crate's one error type. Every public entry point validates its input and returns
//! `Err(Error)` instead of panicking; `py` maps each variant to a Python exception
//! (`ValueError` or `TypeError`) whose message names the offending argument.

use std::fmt;

/// An invalid argument: which argument, and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A value outside its allowed range (maps to Python `ValueError`).
    Value { arg: &'static str, msg: String },
    /// A value of the wrong kind (maps to Python `TypeError`).
    Type { arg: &'static str, msg: String },
}

impl Error {
    pub fn value(arg: &'static str, msg: impl Into<String>) -> Self {
        Error::Value {
            arg,
            msg: msg.into(),
        }
    }
    pub fn type_(arg: &'static str, msg: impl Into<String>) -> Self {
        Error::Type {
            arg,
            msg: msg.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Value { arg, msg } | Error::Type { arg, msg } => write!(f, "{arg}: {msg}"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

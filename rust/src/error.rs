//! The crate's one error type.
//!
//! Every public entry point validates its input and returns `Err(Error)` instead of
//! panicking. With the `python` feature, the PyO3 layer turns each variant into the Python
//! exception the twin raises (`ValueError` or `TypeError`) through one `From<Error> for
//! PyErr` bridge, so the message a Python user reads is written here, in the core, once.
//!
//! Messages start with the name of the offending argument, then say what was wrong:
//!
//! ```
//! use racer_ref::automaton::Automaton;
//! use racer_ref::error::Error;
//!
//! let err = Automaton::new(10_000, 1, 2).unwrap_err();
//! assert!(matches!(err, Error::Value { arg: "ngram", .. }));
//! assert_eq!(err.to_string(), "ngram: must be in [2, 256], got 1");
//! ```

use std::fmt;

/// An invalid argument: which argument, and what was wrong with it.
///
/// ```
/// use racer_ref::draft_tree::build_draft_tree;
/// use racer_ref::error::Error;
/// match build_draft_tree(0, 0, &[vec![0u32]], None, None) {
///     Err(Error::Value { arg, msg }) => {
///         assert_eq!(arg, "capacity");
///         assert_eq!(msg, "must be in [1, 4096], got 0");
///     }
///     other => panic!("expected a capacity error, got {other:?}"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A value outside its allowed range (Python `ValueError`).
    Value {
        /// The argument's name as the caller wrote it (`"capacity"`, `"root_topk"`).
        arg: &'static str,
        /// What was wrong, with the allowed range and the value received.
        msg: String,
    },
    /// A value of the wrong kind (Python `TypeError`), e.g. a float where an int belongs.
    Type {
        /// The argument's name as the caller wrote it.
        arg: &'static str,
        /// What was expected and what came instead.
        msg: String,
    },
}

impl Error {
    /// An [`Error::Value`] for argument `arg`.
    ///
    /// ```
    /// use racer_ref::error::Error;
    /// let e = Error::value("capacity", "must be in [1, 4096], got 0");
    /// assert_eq!(e.to_string(), "capacity: must be in [1, 4096], got 0");
    /// ```
    pub fn value(arg: &'static str, msg: impl Into<String>) -> Self {
        Error::Value {
            arg,
            msg: msg.into(),
        }
    }

    /// An [`Error::Type`] for argument `arg`.
    ///
    /// ```
    /// use racer_ref::error::Error;
    /// let e = Error::type_("root", "must be an int, got float");
    /// assert_eq!(e.arg(), "root");
    /// ```
    pub fn type_(arg: &'static str, msg: impl Into<String>) -> Self {
        Error::Type {
            arg,
            msg: msg.into(),
        }
    }

    /// The name of the argument the error is about.
    ///
    /// ```
    /// use racer_ref::copy_logit::CopyLogitTable;
    /// assert_eq!(CopyLogitTable::new(10, 0).unwrap_err().arg(), "k");
    /// ```
    pub fn arg(&self) -> &'static str {
        match self {
            Error::Value { arg, .. } | Error::Type { arg, .. } => arg,
        }
    }
}

impl fmt::Display for Error {
    /// `"<arg>: <msg>"`, the text of the Python exception.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Value { arg, msg } | Error::Type { arg, msg } => write!(f, "{arg}: {msg}"),
        }
    }
}

impl std::error::Error for Error {}

/// `std::result::Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

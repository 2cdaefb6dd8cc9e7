//! The error type of every dataset reader and writer.

/// What went wrong while reading or writing a dataset. Every variant names the file (or the
/// source name given to a `parse` function); parse errors also give the 1-based line.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// The file could not be opened, read or written.
    #[error("{file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// The text does not follow the format: at `line` (1-based; one past the last line for an
    /// unexpected end of file) the reader expected `expected` and found `found`.
    #[error("{file}:{line}: expected {expected}, found {found}")]
    Parse { file: String, line: usize, expected: String, found: String },
    /// A size announced at `line` would need more than the file can hold or than the documented
    /// limit allows (checked before anything is allocated). `value` saturates at `u64::MAX`.
    #[error("{file}:{line}: {what} = {value} exceeds the limit {limit}")]
    TooLarge { file: String, line: usize, what: String, value: u64, limit: u64 },
    /// A size announced at `line` would need more memory than the limit
    /// ([`crate::limits::max_bytes`]); `message` names what and the bytes.
    #[error("{file}:{line}: {message}")]
    TooMuchMemory { file: String, line: usize, message: String },
    /// An in-memory dataset that cannot be written: its vectors do not match its sizes, or the
    /// format cannot express it (e.g. a BA problem that is not a replication of one observation).
    #[error("{file}: cannot write: {what}")]
    Invalid { file: String, what: String },
}

impl DatasetError {
    /// The 1-based line of a `Parse` or `TooLarge` error.
    pub fn line(&self) -> Option<usize> {
        match self {
            DatasetError::Parse { line, .. }
            | DatasetError::TooLarge { line, .. }
            | DatasetError::TooMuchMemory { line, .. } => Some(*line),
            _ => None,
        }
    }

    /// The file (or source name) the error is about.
    pub fn file(&self) -> &str {
        match self {
            DatasetError::Io { file, .. }
            | DatasetError::Parse { file, .. }
            | DatasetError::TooLarge { file, .. }
            | DatasetError::TooMuchMemory { file, .. }
            | DatasetError::Invalid { file, .. } => file,
        }
    }
}

/// Shorthand for results of this crate's readers and writers.
pub type Result<T, E = DatasetError> = std::result::Result<T, E>;

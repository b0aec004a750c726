//! Where an expression is wrong, by line and column, and how.

/// Where the expression is wrong, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogqlError {
    /// 1-based, in characters, on the line the expression is written (lines counted
    /// into it for a multi-line expression).
    pub column: usize,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for LogqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line > 1 {
            write!(
                f,
                "at line {}, column {}: {}",
                self.line, self.column, self.message
            )
        } else {
            write!(f, "at column {}: {}", self.column, self.message)
        }
    }
}

impl std::error::Error for LogqlError {}

pub(super) fn position(text: &str, at: usize) -> (usize, usize) {
    let (mut line, mut column) = (1, 1);
    for c in text.chars().take(at) {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line, column)
}

/// An error at character offset `at` of `text`.
pub(super) fn error_at(text: &str, at: usize, message: impl Into<String>) -> LogqlError {
    let (line, column) = position(text, at);
    LogqlError {
        column,
        line,
        message: message.into(),
    }
}

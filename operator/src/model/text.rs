//! Text the operator writes where the server limits its size (Event notes, reasons kept
//! of a refused rule).

/// `s` cut to at most `max` bytes, at a character boundary.
pub fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// `s` cut to at most `max` bytes with `…` at the end when it was cut.
pub fn shorten(s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut cut = truncate(s, max.saturating_sub('…'.len_utf8()));
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_fall_on_character_boundaries() {
        assert_eq!(truncate("abc".into(), 5), "abc");
        assert_eq!(truncate("ééé".into(), 3), "é");
        assert_eq!(shorten("abc".into(), 3), "abc");
        assert_eq!(shorten("abcdef".into(), 5), "ab…");
        assert_eq!(shorten("éééé".into(), 6), "é…");
    }
}

//! Bordered tables for `-f table` (AWF (Go)'s table layout).
//!
//! Every column has a fixed width `w`; a separator line is `+` then `-`×(w+2) and `+` per
//! column; a row is `|` then ` <cell padded to w> |` per cell. A cell longer than its width is
//! cut to w−3 characters plus `...`. A full-width row spans all columns: its inner width is
//! Σ(w+3)−3.
//!
//! Source: issue 8 notes §0 ("Bordered table helper").

/// A bordered table with fixed column widths (in characters).
#[derive(Debug, Clone)]
pub struct Table {
    widths: Vec<usize>,
    out: String,
}

/// `s` cut to `w` characters (w−3 plus `...` when longer), padded on the right to `w`.
pub fn fit(s: &str, w: usize) -> String {
    let n = s.chars().count();
    let cut = if n > w {
        let keep = w.saturating_sub(3);
        let mut c: String = s.chars().take(keep).collect();
        c.push_str(&"...".chars().take(w - keep).collect::<String>());
        c
    } else {
        s.to_owned()
    };
    format!("{cut:<w$}")
}

impl Table {
    /// An empty table with these column widths.
    pub fn new(widths: &[usize]) -> Self {
        Self {
            widths: widths.to_vec(),
            out: String::new(),
        }
    }

    /// Inner width of a full-width row: Σ(w+3)−3.
    pub fn inner(&self) -> usize {
        self.widths
            .iter()
            .map(|w| w + 3)
            .sum::<usize>()
            .saturating_sub(3)
    }

    /// Appends a separator line.
    pub fn sep(&mut self) -> &mut Self {
        self.out.push('+');
        for w in &self.widths {
            self.out.push_str(&"-".repeat(w + 2));
            self.out.push('+');
        }
        self.out.push('\n');
        self
    }

    /// Appends a full-width separator line (`+`, dashes, `+`).
    pub fn full_sep(&mut self) -> &mut Self {
        self.out
            .push_str(&format!("+{}+\n", "-".repeat(self.inner() + 2)));
        self
    }

    /// Appends one row; missing cells are empty, extra cells are ignored.
    pub fn row<S: AsRef<str>>(&mut self, cells: &[S]) -> &mut Self {
        self.out.push('|');
        for (i, w) in self.widths.iter().enumerate() {
            let c = cells.get(i).map_or("", AsRef::as_ref);
            self.out.push_str(&format!(" {} |", fit(c, *w)));
        }
        self.out.push('\n');
        self
    }

    /// Appends a full-width row (content cut/padded to [`Table::inner`]).
    pub fn full_row(&mut self, content: &str) -> &mut Self {
        self.out
            .push_str(&format!("| {} |\n", fit(content, self.inner())));
        self
    }

    /// Header row framed by separators.
    pub fn header<S: AsRef<str>>(&mut self, cells: &[S]) -> &mut Self {
        self.sep().row(cells).sep()
    }

    /// The text so far.
    pub fn text(&self) -> &str {
        &self.out
    }
}

/// Left-aligned columns two spaces apart, each as wide as its widest cell (nothing cut);
/// the last column is not padded.
pub fn aligned(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; n];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_padded_and_long_cells_cut_with_dots() {
        let mut t = Table::new(&[4, 6]);
        t.header(&["NAME", "SOURCE"]).row(&["abcdefgh", "x"]).sep();
        assert_eq!(
            t.text(),
            "+------+--------+\n| NAME | SOURCE |\n+------+--------+\n| a... | x      |\n+------+--------+\n"
        );
    }

    #[test]
    fn full_width_rows_span_every_column() {
        let mut t = Table::new(&[4, 6]);
        assert_eq!(t.inner(), 13);
        t.full_sep().full_row("Status: ok").full_sep();
        assert_eq!(
            t.text(),
            "+---------------+\n| Status: ok    |\n+---------------+\n"
        );
    }
}

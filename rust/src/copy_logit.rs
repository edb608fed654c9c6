//! The copy-logit table (one decoding step, step 8).
//!
//! For every token id `v` the table keeps the top-`k` next-token ids that the target model
//! predicted right after its most recent verified occurrence of `v`. It is dense:
//! `[vocab_size, k]` ids in one flat `Vec<u32>`, plus one `seen` flag per row, so a row
//! that was never written is *empty* (it drafts nothing) rather than "k copies of token 0".
//!
//! The table only stores what it is given. Which rows to pass is the verification loop's
//! choice: after prefill every prompt position, after a verify pass every tree node
//! (rejected ones included, the paper's default) or only the accepted ones.

use crate::error::{Error, Result};
use crate::{Id, TokenId};

/// The largest table we agree to allocate: `vocab_size * k` entries (1 GiB of `u32`).
/// Real vocabularies (<= 262,144) with k <= 1,024 stay well below it.
pub const MAX_TABLE_ENTRIES: usize = 1 << 28;

/// Check that every id in `ids` lies in `[0, vocab_size)`; the error names `arg`, the
/// offending value and its flat index.
///
/// ```
/// use racer_ref::copy_logit::check_token_ids;
/// assert!(check_token_ids("token_ids", &[0u32, 9], 10).is_ok());
/// let e = check_token_ids("token_ids", &[0u32, 10], 10).unwrap_err();
/// assert_eq!(
///     e.to_string(),
///     "token_ids: token id 10 at index 1 is outside [0, vocab_size) = [0, 10)"
/// );
/// ```
pub fn check_token_ids<T: Id>(arg: &'static str, ids: &[T], vocab_size: usize) -> Result<()> {
    // One pass, no allocation: `vocab_size` fits i64 because it is at most MAX_TABLE_ENTRIES.
    let hi = vocab_size as i64;
    if let Some((i, v)) = ids
        .iter()
        .map(|&v| v.into())
        .enumerate()
        .find(|&(_, v)| v < 0 || v >= hi)
    {
        return Err(Error::value(
            arg,
            format!("token id {v} at index {i} is outside [0, vocab_size) = [0, {vocab_size})"),
        ));
    }
    Ok(())
}

/// Check that a single token id lies in `[0, vocab_size)` and return it as a [`TokenId`].
///
/// ```
/// use racer_ref::copy_logit::check_token_id;
/// assert_eq!(check_token_id("root", 3u32, 10), Ok(3));
/// assert!(check_token_id("root", -1i64, 10).is_err()); // a Python int, say
/// ```
pub fn check_token_id<T: Id>(arg: &'static str, id: T, vocab_size: usize) -> Result<TokenId> {
    let id: i64 = id.into();
    if id < 0 || id >= vocab_size as i64 {
        return Err(Error::value(
            arg,
            format!("token id {id} is outside [0, vocab_size) = [0, {vocab_size})"),
        ));
    }
    Ok(id as u32)
}

/// Validate the arguments of [`CopyLogitTable::observe`] for a table of `vocab_size` rows
/// and `k` columns (also used by drafters without a table, so that every method rejects
/// the same input).
///
/// ```
/// use racer_ref::copy_logit::check_observe;
/// // Two tokens, top-3 ids each, for a table keeping k = 2.
/// assert!(check_observe(&[1u32, 2], &[3, 4, 5, 6, 7, 8], [2, 3], 10, 2).is_ok());
/// let e = check_observe(&[1u32], &[3], [1, 1], 10, 2).unwrap_err();
/// assert_eq!(
///     e.to_string(),
///     "topk_ids: expected shape (n, k') with n = len(token_ids) = 1 and k' >= k = 2, got (1, 1)"
/// );
/// ```
pub fn check_observe<T: Id>(
    token_ids: &[T],
    topk_ids: &[T],
    topk_shape: [usize; 2],
    vocab_size: usize,
    k: usize,
) -> Result<()> {
    let n = token_ids.len();
    let [rows, cols] = topk_shape;
    if rows != n || cols < k {
        return Err(Error::value(
            "topk_ids",
            format!(
                "expected shape (n, k') with n = len(token_ids) = {n} and k' >= k = {k}, \
                 got ({rows}, {cols})"
            ),
        ));
    }
    if topk_ids.len() != rows * cols {
        return Err(Error::value(
            "topk_ids",
            format!(
                "{} values do not fill shape ({rows}, {cols})",
                topk_ids.len()
            ),
        ));
    }
    check_token_ids("token_ids", token_ids, vocab_size)?;
    // Only the kept columns have to be valid ids; columns past k are ignored.
    let hi = vocab_size as i64;
    for i in 0..n {
        for j in 0..k {
            let v: i64 = topk_ids[i * cols + j].into();
            if v < 0 || v >= hi {
                return Err(Error::value(
                    "topk_ids",
                    format!(
                        "token id {v} at [{i}, {j}] is outside [0, vocab_size) = [0, {vocab_size})"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Marks an empty row in its first slot. Token ids are below `vocab_size <= 2^28`, so
/// this value never is a real id.
const EMPTY: u32 = u32::MAX;

/// Dense `[vocab_size, k]` copy-logit table; an unseen row holds a sentinel (`u32::MAX`,
/// never a token id) in its first slot.
///
/// Why a sentinel rather than a separate `seen: Vec<bool>` (the Python twin's choice): a
/// draft step reads about 60 scattered rows, often from a cold cache; with the flag inside
/// the row each read costs one cache line instead of two.
///
/// ```
/// use racer_ref::copy_logit::CopyLogitTable;
/// let mut table = CopyLogitTable::new(100, 2)?; // vocabulary of 100 ids, k = 2
/// // The target model was fed tokens 7 and 8; its top-2 predictions there, best first:
/// table.observe(&[7, 8], &[8, 3, 9, 1], [2, 2])?;
/// assert_eq!(table.row(7), &[8, 3]); // what followed 7 (and the runner-up)
/// assert!(table.row(9).is_empty());  // never observed: drafts nothing
/// # Ok::<(), racer_ref::error::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct CopyLogitTable {
    vocab_size: usize,
    k: usize,
    /// Row `v` is `ids[v * k .. (v + 1) * k]`, ranks 0..k (best first), or starts with
    /// `EMPTY` when never written.
    ids: Vec<TokenId>,
    num_seen: usize,
}

impl CopyLogitTable {
    /// Check the parameters of [`CopyLogitTable::new`] without allocating; returns them as
    /// `(vocab_size, k)`. `k_arg` is the name the caller gave `k` (a table's `"k"`, a
    /// drafter's `"breadth"`), so that the message names the caller's argument.
    ///
    /// Errors: `vocab_size < 1`, `k` outside `[1, vocab_size]`, or
    /// `vocab_size * k > MAX_TABLE_ENTRIES`.
    ///
    /// ```
    /// use racer_ref::copy_logit::CopyLogitTable;
    /// assert_eq!(CopyLogitTable::check_params(49_152, 8, "k"), Ok((49_152, 8)));
    /// let e = CopyLogitTable::check_params(10, 11, "breadth").unwrap_err();
    /// assert_eq!(e.to_string(), "breadth: must be in [1, vocab_size] = [1, 10], got 11");
    /// ```
    pub fn check_params(vocab_size: i64, k: i64, k_arg: &'static str) -> Result<(usize, usize)> {
        if vocab_size < 1 {
            return Err(Error::value(
                "vocab_size",
                format!("must be >= 1, got {vocab_size}"),
            ));
        }
        if k < 1 || k > vocab_size {
            return Err(Error::value(
                k_arg,
                format!("must be in [1, vocab_size] = [1, {vocab_size}], got {k}"),
            ));
        }
        if vocab_size.saturating_mul(k) > MAX_TABLE_ENTRIES as i64 {
            return Err(Error::value(
                "vocab_size",
                format!(
                    "vocab_size * {k_arg} = {vocab_size} * {k} exceeds the table limit of \
                     {MAX_TABLE_ENTRIES} entries"
                ),
            ));
        }
        // In range: both fit usize and their product is at most MAX_TABLE_ENTRIES.
        Ok((vocab_size as usize, k as usize))
    }

    /// An empty table for token ids in `[0, vocab_size)` keeping `k` ids per row.
    ///
    /// Errors: see [`CopyLogitTable::check_params`] (the message names `k` as `"k"`).
    ///
    /// ```
    /// use racer_ref::copy_logit::CopyLogitTable;
    /// let t = CopyLogitTable::new(49_152, 8)?;
    /// assert_eq!((t.vocab_size(), t.k(), t.num_seen()), (49_152, 8, 0));
    /// assert_eq!(
    ///     CopyLogitTable::new(10, 0).unwrap_err().to_string(),
    ///     "k: must be in [1, vocab_size] = [1, 10], got 0"
    /// );
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn new(vocab_size: i64, k: i64) -> Result<Self> {
        let (vocab_size, k) = Self::check_params(vocab_size, k, "k")?;
        Ok(CopyLogitTable {
            vocab_size,
            k,
            ids: vec![EMPTY; vocab_size * k],
            num_seen: 0,
        })
    }

    /// Number of token ids the table covers.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Ids kept per row (the breadth `k`).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Number of rows written at least once since the last reset.
    pub fn num_seen(&self) -> usize {
        self.num_seen
    }

    /// Whether row `token` has been written (false for ids outside the vocabulary).
    ///
    /// ```
    /// use racer_ref::copy_logit::CopyLogitTable;
    /// let mut t = CopyLogitTable::new(10, 2)?;
    /// t.observe(&[4], &[5, 6], [1, 2])?;
    /// assert!(t.is_seen(4) && !t.is_seen(5) && !t.is_seen(99));
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn is_seen(&self, token: TokenId) -> bool {
        self.ids
            .get(token as usize * self.k)
            .is_some_and(|&first| first != EMPTY)
    }

    /// Row `token`: its `k` next-token ids best first, or an empty slice when the token was
    /// never observed (or lies outside the vocabulary).
    ///
    /// ```
    /// use racer_ref::copy_logit::CopyLogitTable;
    /// let mut t = CopyLogitTable::new(10, 2)?;
    /// t.observe(&[4], &[5, 6, 7], [1, 3])?; // a wider top-3: only k = 2 ids are kept
    /// assert_eq!(t.row(4), &[5, 6]);
    /// assert!(t.row(3).is_empty());
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    #[inline]
    pub fn row(&self, token: TokenId) -> &[TokenId] {
        let start = token as usize * self.k;
        match self.ids.get(start..start + self.k) {
            Some(row) if row[0] != EMPTY => row,
            _ => &[],
        }
    }

    /// Write row `token_ids[i]` := the first `k` columns of row `i` of `topk_ids`
    /// (step 8: `table[token(u)] = topk(logits[u], k)`).
    ///
    /// * `token_ids`: `(n,)` ids the target model was fed.
    /// * `topk_ids`: row-major `(n, k')` ids with `k' >= k`: row `i` holds the top-k' ids of
    ///   the logits at position `i`, best first. Only the first `k` columns are kept, so a
    ///   caller may pass a wider top-k.
    ///
    /// When a token occurs several times in `token_ids` the last occurrence wins (it is the
    /// most recent one). Everything is validated before the first write: on error the table
    /// is unchanged.
    ///
    /// ```
    /// use racer_ref::copy_logit::CopyLogitTable;
    /// let mut t = CopyLogitTable::new(10, 2)?;
    /// // Token 4 twice: the later row (9, 0) wins.
    /// t.observe(&[4, 5, 4], &[1, 2, 6, 7, 9, 0], [3, 2])?;
    /// assert_eq!(t.row(4), &[9, 0]);
    /// assert!(t.observe(&[4], &[10, 1], [1, 2]).is_err()); // 10 is not a token id
    /// assert_eq!(t.row(4), &[9, 0]);                         // unchanged
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn observe(
        &mut self,
        token_ids: &[TokenId],
        topk_ids: &[TokenId],
        topk_shape: [usize; 2],
    ) -> Result<()> {
        check_observe(token_ids, topk_ids, topk_shape, self.vocab_size, self.k)?;
        self.observe_trusted(token_ids, topk_ids, topk_shape);
        Ok(())
    }

    /// [`CopyLogitTable::observe`] for arguments the caller checked with
    /// [`check_observe`] (a drafter, the PyO3 layer).
    pub(crate) fn observe_trusted(
        &mut self,
        token_ids: &[TokenId],
        topk_ids: &[TokenId],
        topk_shape: [usize; 2],
    ) {
        let cols = topk_shape[1];
        // Later rows overwrite earlier ones for a repeated token (0 <= t < vocab_size).
        for (i, &t) in token_ids.iter().enumerate() {
            let v = t as usize;
            let src = &topk_ids[i * cols..i * cols + self.k];
            let dst = &mut self.ids[v * self.k..(v + 1) * self.k];
            // A row written for the first time: one more seen row (a rewrite is not).
            self.num_seen += usize::from(dst[0] == EMPTY);
            dst.copy_from_slice(src);
        }
    }

    /// Forget every row (all rows empty again).
    ///
    /// ```
    /// use racer_ref::copy_logit::CopyLogitTable;
    /// let mut t = CopyLogitTable::new(10, 1)?;
    /// t.observe(&[1], &[2], [1, 1])?;
    /// t.reset();
    /// assert_eq!(t.num_seen(), 0);
    /// # Ok::<(), racer_ref::error::Error>(())
    /// ```
    pub fn reset(&mut self) {
        // Only the first slot of each row marks it empty.
        self.ids
            .iter_mut()
            .step_by(self.k)
            .for_each(|first| *first = EMPTY);
        self.num_seen = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unseen_rows_are_empty_not_zero() {
        let t = CopyLogitTable::new(10, 3).unwrap();
        assert!(t.row(0).is_empty());
        assert!(t.row(9).is_empty());
        assert!(t.row(10).is_empty());
        assert_eq!(t.num_seen(), 0);
    }

    #[test]
    fn observe_keeps_first_k_columns_and_last_occurrence() {
        let mut t = CopyLogitTable::new(10, 2).unwrap();
        // token 4 appears twice: the second row wins.
        t.observe(&[4, 5, 4], &[1, 2, 3, 6, 7, 8, 9, 0, 1], [3, 3])
            .unwrap();
        assert_eq!(t.row(4), &[9, 0]);
        assert_eq!(t.row(5), &[6, 7]);
        assert_eq!(t.num_seen(), 2);
        assert!(t.row(1).is_empty());
        t.reset();
        assert!(t.row(4).is_empty());
        assert_eq!(t.num_seen(), 0);
    }

    #[test]
    fn bad_input_leaves_table_unchanged() {
        let mut t = CopyLogitTable::new(10, 2).unwrap();
        t.observe(&[1], &[2, 3], [1, 2]).unwrap();
        // shape: too few columns
        let e = t.observe(&[1], &[5], [1, 1]).unwrap_err();
        assert!(matches!(
            e,
            Error::Value {
                arg: "topk_ids",
                ..
            }
        ));
        // rows != n
        assert!(t.observe(&[1, 2], &[5, 6], [1, 2]).is_err());
        // id out of range in the last row: nothing written, not even the first row
        let e = t.observe(&[7, 1], &[5, 6, 5, 10], [2, 2]).unwrap_err();
        assert!(e.to_string().contains("[1, 1]"), "{e}");
        assert!(t.observe(&[u32::MAX], &[5, 6], [1, 2]).is_err());
        assert!(t.observe(&[10], &[5, 6], [1, 2]).is_err());
        assert_eq!(t.row(1), &[2, 3]);
        assert!(t.row(7).is_empty());
        // ignored columns past k may hold anything
        t.observe(&[3], &[4, 5, u32::MAX], [1, 3]).unwrap();
        assert_eq!(t.row(3), &[4, 5]);
    }

    #[test]
    fn constructor_validates() {
        assert!(CopyLogitTable::new(0, 1).is_err());
        assert!(CopyLogitTable::new(5, 0).is_err());
        assert!(CopyLogitTable::new(5, 6).is_err());
        assert!(CopyLogitTable::new(1 << 28, 2).is_err());
        assert!(CopyLogitTable::new(5, 5).is_ok());
    }

    #[test]
    fn empty_observe_is_a_no_op() {
        let mut t = CopyLogitTable::new(4, 2).unwrap();
        t.observe(&[], &[], [0, 2]).unwrap();
        assert_eq!(t.num_seen(), 0);
    }
}

//! "Did you mean": the nearest of the names a user could have meant, by edit distance, for a
//! recipient missing from the directory or a profile not saved here.

/// The candidate nearest to `word` (case-insensitive Levenshtein distance), if one is close
/// enough to be a slip: at most a third of the word's length, and at least one edit away.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    nearest(word, candidates, slips(word))
}

/// The address among the directory's `addresses` nearest to `to`, allowing as many edits as a slip in
/// its last segment (the name) would make: a mistyped name or workspace is found, another
/// agent's address is not.
pub fn recipient<'a>(to: &str, addresses: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let name = to.rsplit('/').next().unwrap_or(to);
    nearest(to, addresses, slips(name)).map(str::to_owned)
}

/// How many edits still count as a slip in `word`.
fn slips(word: &str) -> usize {
    (word.chars().count() / 3).max(1)
}

fn nearest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    limit: usize,
) -> Option<&'a str> {
    let word = word.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (distance(&word, &c.to_lowercase()), c))
        .filter(|&(d, _)| (1..=limit).contains(&d))
        .min_by_key(|&(d, c)| (d, c))
        .map(|(_, c)| c)
}

/// The Levenshtein distance of two strings, by characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_and_slips() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(
            closest("reviewr", ["reviewer", "release-bot"]),
            Some("reviewer")
        );
        assert_eq!(
            closest("reviewer", ["reviewer"]),
            None,
            "an exact name is no slip"
        );
        assert_eq!(closest("xyz", ["reviewer"]), None);
    }

    #[test]
    fn a_recipient_is_suggested_by_address_or_by_name_in_its_workspace() {
        let cards = [
            "agent://acme/backend/reviewer",
            "agent://acme/frontend/designer",
        ];
        assert_eq!(
            recipient("agent://acme/backend/reveiwer", cards).as_deref(),
            Some("agent://acme/backend/reviewer")
        );
        assert_eq!(recipient("agent://acme/backend/zzz", cards), None);
    }
}

//! The one text normalisation every word error rate of the project is scored under
//! (`transcribe --score`, `empathic words`, `tools/asr_reference.py`, the tests).
//!
//! Contract: [`normalised_words`] applies, in order: lower case; `%` read as ` percent`;
//! numbers written in digits spelled out in words the way they are read (`42` forty two,
//! `1455` fourteen fifty five: a four-digit number from 1100 to 1999 and from 2010 to 2099
//! is read as a year, in two pairs; otherwise as a cardinal, `2005` two thousand five;
//! `15th` fifteenth; digits grouped with commas, `1,000`, are one number; a decimal point
//! reads `point` and each digit); every character that is not a letter, a digit or an
//! apostrophe becomes a space (so hyphens split: `forty-two` is `forty two`, `to-day` is
//! `to day`); apostrophes at a word's edges go; the titles `mr`, `mrs`, `dr` become
//! `mister`, `missus`, `doctor`. Nothing else is changed: spellings (`neighbour`,
//! `neighbor`), fillers and contractions count as written. [`word_errors`] is the edit
//! distance (substitutions, deletions, insertions) between the normalised word lists.

const ONES: [&str; 20] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: [&str; 10] = [
    "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];

/// A cardinal below a million million, in words.
fn cardinal(n: u64) -> Vec<String> {
    fn below_thousand(n: u64, out: &mut Vec<String>) {
        if n >= 100 {
            out.push(ONES[(n / 100) as usize].to_string());
            out.push("hundred".to_string());
        }
        let r = n % 100;
        if r >= 20 {
            out.push(TENS[(r / 10) as usize].to_string());
            if r % 10 != 0 {
                out.push(ONES[(r % 10) as usize].to_string());
            }
        } else if r > 0 || n == 0 {
            out.push(ONES[r as usize].to_string());
        }
    }
    let mut out = Vec::new();
    if n == 0 {
        out.push("zero".to_string());
        return out;
    }
    for (scale, name) in [
        (1_000_000_000u64, "billion"),
        (1_000_000, "million"),
        (1_000, "thousand"),
    ] {
        let group = (n / scale) % 1_000;
        if group > 0 {
            below_thousand(group, &mut out);
            out.push(name.to_string());
        }
    }
    if n % 1_000 != 0 {
        below_thousand(n % 1_000, &mut out);
    }
    out
}

/// A number as read: years in two pairs, other numbers as cardinals; digits one by one
/// when too long for a cardinal.
fn spoken(digits: &str) -> Vec<String> {
    let Ok(n) = digits.parse::<u64>() else {
        return digits
            .chars()
            .filter_map(|c| c.to_digit(10))
            .map(|d| ONES[d as usize].to_string())
            .collect();
    };
    if n >= 1_000_000_000_000 {
        return spoken(&format!("{n}x"));
    }
    let year = digits.len() == 4 && ((1_100..2_000).contains(&n) || (2_010..2_100).contains(&n));
    if year {
        let (hi, lo) = (n / 100, n % 100);
        let mut out = cardinal(hi);
        match lo {
            0 => out.push("hundred".to_string()),
            1..=9 => {
                out.push("oh".to_string());
                out.extend(cardinal(lo));
            }
            _ => out.extend(cardinal(lo)),
        }
        return out;
    }
    cardinal(n)
}

/// The ordinal of a cardinal's last word (`five` fifth, `twenty` twentieth).
fn ordinal(mut words: Vec<String>) -> Vec<String> {
    if let Some(last) = words.pop() {
        let o = match last.as_str() {
            "one" => "first".to_string(),
            "two" => "second".to_string(),
            "three" => "third".to_string(),
            "five" => "fifth".to_string(),
            "eight" => "eighth".to_string(),
            "nine" => "ninth".to_string(),
            "twelve" => "twelfth".to_string(),
            w if w.ends_with('y') => format!("{}ieth", &w[..w.len() - 1]),
            w => format!("{w}th"),
        };
        words.push(o);
    }
    words
}

/// Spells out the numbers of one lower-cased text (see the module's contract).
fn spell_numbers(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 16);
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            if chars[i] == '%' {
                out.push_str(" percent ");
            } else {
                out.push(chars[i]);
            }
            i += 1;
            continue;
        }
        // Digits, with commas between groups of three (1,000,000).
        let mut digits = String::new();
        while i < chars.len() {
            if chars[i].is_ascii_digit() {
                digits.push(chars[i]);
                i += 1;
            } else if chars[i] == ','
                && i + 3 < chars.len() + 1
                && chars[i + 1..].iter().take(3).all(|c| c.is_ascii_digit())
                && chars.get(i + 4).is_none_or(|c| !c.is_ascii_digit())
            {
                i += 1;
            } else {
                break;
            }
        }
        let mut words = spoken(&digits);
        // A decimal part: "point" and each digit.
        if chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit()) {
            i += 1;
            words.push("point".to_string());
            while i < chars.len() && chars[i].is_ascii_digit() {
                words.push(ONES[chars[i].to_digit(10).unwrap_or(0) as usize].to_string());
                i += 1;
            }
        }
        // An ordinal suffix.
        let rest: String = chars[i..].iter().take(2).collect();
        if ["st", "nd", "rd", "th"].contains(&rest.as_str())
            && chars.get(i + 2).is_none_or(|c| !c.is_alphanumeric())
        {
            words = ordinal(words);
            i += 2;
        }
        out.push(' ');
        out.push_str(&words.join(" "));
        out.push(' ');
    }
    out
}

/// The scoring normalisation's words of `text` (see the module's contract).
pub fn normalised_words(text: &str) -> Vec<String> {
    spell_numbers(&text.to_lowercase())
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '\'' {
                c
            } else {
                ' '
            }
        })
        .collect::<String>()
        .split_whitespace()
        .map(|w| w.trim_matches('\''))
        .filter(|w| !w.is_empty())
        .map(|w| match w {
            "mr" => "mister".to_string(),
            "mrs" => "missus".to_string(),
            "dr" => "doctor".to_string(),
            w => w.to_string(),
        })
        .collect()
}

/// Word errors (substitutions + deletions + insertions, by edit distance) of `hypothesis`
/// against `reference`, and the reference's word count, both normalised.
pub fn word_errors(reference: &str, hypothesis: &str) -> (usize, usize) {
    let r = normalised_words(reference);
    let h = normalised_words(hypothesis);
    let mut prev: Vec<usize> = (0..=h.len()).collect();
    for (i, rw) in r.iter().enumerate() {
        let mut cur = vec![i + 1; h.len() + 1];
        for (j, hw) in h.iter().enumerate() {
            let sub = prev[j] + usize::from(rw != hw);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    (prev[h.len()], r.len())
}

/// Word error rate of `hypothesis` against `reference` (0 for an empty reference).
pub fn word_error_rate(reference: &str, hypothesis: &str) -> f64 {
    let (errors, words) = word_errors(reference, hypothesis);
    if words == 0 {
        0.0
    } else {
        errors as f64 / words as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(text: &str) -> String {
        normalised_words(text).join(" ")
    }

    #[test]
    fn word_error_rate_counts_edits_after_normalising() {
        assert_eq!(word_errors("Hello, world!", "hello world"), (0, 2));
        assert_eq!(word_errors("he was not ill", "he was ill"), (1, 4));
        assert_eq!(word_errors("a b c", "a x c d"), (2, 3));
        assert_eq!(word_errors("don't stop", "Don't STOP."), (0, 2));
        assert_eq!(word_error_rate("", "anything"), 0.0);
    }

    #[test]
    fn numbers_are_scored_as_they_are_read() {
        assert_eq!(n("10 of clubs"), "ten of clubs");
        assert_eq!(
            n("the 42-line Bible of about 1455,"),
            "the forty two line bible of about fourteen fifty five"
        );
        assert_eq!(n("the 15th century"), "the fifteenth century");
        assert_eq!(
            n("1st 2nd 3rd 21st 40th"),
            "first second third twenty first fortieth"
        );
        assert_eq!(
            n("in 2005 and 2024 and 1900 and 1905"),
            "in two thousand five and twenty twenty four and nineteen hundred and nineteen oh five"
        );
        assert_eq!(
            n("1,000 people, 7 of them"),
            "one thousand people seven of them"
        );
        assert_eq!(n("100% sure"), "one hundred percent sure");
        assert_eq!(n("3.25 kg"), "three point two five kg");
        assert_eq!(n("room 101"), "room one hundred one");
        assert_eq!(
            n("1,234,567"),
            "one million two hundred thirty four thousand five hundred sixty seven"
        );
        assert_eq!(word_errors("fourteen fifty-five", "1455."), (0, 3));
    }

    #[test]
    fn titles_hyphens_and_apostrophes() {
        assert_eq!(n("Mr. John Dashwood"), "mister john dashwood");
        assert_eq!(
            n("Mrs Jennings and Dr. Smith"),
            "missus jennings and doctor smith"
        );
        assert_eq!(
            n("cold-hearted 'twas the children's"),
            "cold hearted twas the children's"
        );
    }
}

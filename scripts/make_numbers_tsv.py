#!/usr/bin/env python3
"""Writes the example parallel file of the `translation` task: the numbers 0 to
999 written out in English (US usage, "three hundred twelve") and in French
(traditional spelling: "trois cent douze", "quatre-vingts", "soixante et onze"),
one `English TAB French` pair a line.

It is a small, real translation problem whose rules are public fact: French
counts 70-99 in twenties (soixante-dix = sixty-ten, quatre-vingt-dix-neuf =
four-twenty-ten-nine), so the output is not a word-for-word copy of the input,
and sentence lengths vary from 3 to 27 characters.

Usage: scripts/make_numbers_tsv.py > configs/data/numbers_en_fr.tsv
"""

EN_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
            "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
            "nineteen"]
EN_TENS = {2: "twenty", 3: "thirty", 4: "forty", 5: "fifty", 6: "sixty", 7: "seventy", 8: "eighty",
           9: "ninety"}

FR_UNITS = ["zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf", "dix",
            "onze", "douze", "treize", "quatorze", "quinze", "seize", "dix-sept", "dix-huit", "dix-neuf"]
FR_TENS = {2: "vingt", 3: "trente", 4: "quarante", 5: "cinquante", 6: "soixante"}


def english(n):
    if n < 20:
        return EN_UNITS[n]
    if n < 100:
        tens, unit = divmod(n, 10)
        return EN_TENS[tens] + ("-" + EN_UNITS[unit] if unit else "")
    hundreds, rest = divmod(n, 100)
    return EN_UNITS[hundreds] + " hundred" + (" " + english(rest) if rest else "")


def french_below_100(n, final):
    """n in 0..99; `final`: nothing follows (quatre-vingts takes its s only then)."""
    if n < 20:
        return FR_UNITS[n]
    tens, unit = divmod(n, 10)
    if tens <= 6:
        if unit == 0:
            return FR_TENS[tens]
        return FR_TENS[tens] + (" et un" if unit == 1 else "-" + FR_UNITS[unit])
    if tens == 7:  # 70-79: soixante + 10..19
        return "soixante" + (" et onze" if unit == 1 else "-" + FR_UNITS[10 + unit])
    if tens == 8:  # 80-89: quatre-vingt(s) + 1..9, without "et"
        return "quatre-vingts" if unit == 0 and final else "quatre-vingt" + ("-" + FR_UNITS[unit] if unit else "")
    return "quatre-vingt-" + FR_UNITS[10 + unit]  # 90-99


def french(n):
    if n < 100:
        return french_below_100(n, final=True)
    hundreds, rest = divmod(n, 100)
    head = "cent" if hundreds == 1 else FR_UNITS[hundreds] + (" cent" if rest else " cents")
    return head + (" " + french_below_100(rest, final=True) if rest else "")


def main():
    for n in range(1000):
        print(f"{english(n)}\t{french(n)}")


if __name__ == "__main__":
    main()

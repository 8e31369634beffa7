"""The caption grammars of SynthCaps, one job: hand-written tables that caption a scene in eight languages.

A scene is a sequence of parts; a part is one sound event or two overlapping ones, and every event is
loud or quiet (silence has no loudness). :func:`caption_scene` describes a scene in five paraphrase styles
(:data:`NUM_CAPTION_STYLES`); style ``k`` is written by hand in each language as a translation of the
English style ``k``, so caption ``k`` in any language translates English caption ``k``:

=====  =============================================  ==============================
style  sequence (2 / 3 parts)                         overlap of ``a`` and ``b``
=====  =============================================  ==============================
0      "A, followed by B (and then C)."              "a together with b"
1      "First A, then B(, and finally C)."           "a and b at the same time"
2      "A recording of A, then B(, then C)."         "a mixed with b"
3      "A, (and) after that B(, and finally C)."     "a over b"
4      "The clip starts with A (, continues with B)  "a accompanied by b"
       and ends with B/C."
=====  =============================================  ==============================

Noun phrases carry their own grammar: articles (none for mass nouns and plurals), adjective agreement in
gender and number (French, Spanish, Catalan, Dutch), German case and adjective declension, French and
Catalan elision after *de*, participle agreement with the head noun ("suivie", "seguidos", ...).

Template mini-language: ``{1}``, ``{2}``, ``{3}`` are the parts of a frame, ``{a}``, ``{b}`` the events of
an overlap; ``{1:dat}`` asks for a grammatical context (German ``acc``/``dat``, French/Catalan ``de`` =
the phrase preceded by an elided *de*, French ``que``). ``{a}`` inherits the context of its part, every other slot
without one is ``nom``. ``[suivi,suivie,suivis,suivies:1]`` picks the form that agrees with slot ``1``'s
head noun (masculine, feminine, masculine plural, feminine plural).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

NUM_CAPTION_STYLES = 5
"""Captions per clip and language (the AudioCaps/Clotho convention)."""

LOUDNESS_LEVELS: tuple[str, ...] = ("loud", "quiet")


@dataclass(frozen=True)
class SoundOccurrence:
    """One sound event in a scene: ``event`` from ``SOUND_EVENTS``, ``loudness`` ``"loud"``/``"quiet"``
    (``None`` for silence)."""

    event: str
    loudness: str | None


Part = tuple[SoundOccurrence, ...]
"""One or two events heard at the same time."""
Scene = tuple[Part, ...]
"""Parts heard one after the other."""


@dataclass(frozen=True)
class _Words:
    """A noun phrase without article; ``{L}`` marks where the loudness adjective goes."""

    template: str
    agreement: str
    kind: str  # "count" (takes the indefinite article), "mass" or "plural" (no article)


_ROMANCE_AGREEMENT = ("m", "f", "mpl", "fpl")


def _romance_loudness(loud: Sequence[str], quiet: Sequence[str]) -> dict[str, dict[str, str]]:
    return {
        "loud": dict(zip(_ROMANCE_AGREEMENT, loud)),
        "quiet": dict(zip(_ROMANCE_AGREEMENT, quiet)),
    }


_SLOT = re.compile(r"\{(\w)(?::(\w+))?\}")
_AGREEMENT = re.compile(r"\[([^\]:]+):(\w)\]")
_VOWEL_START = re.compile(r"^[aeiouhàâèéêíïòóôúü]", re.IGNORECASE)


class _Grammar:
    """One language: its noun phrases, five sequence frames and five overlap templates."""

    def __init__(
        self,
        words: dict[str, _Words],
        loudness: dict[str, dict[str, str]],
        frames: Sequence[dict[int, str]],
        overlaps: Sequence[str],
        article: Callable[[_Words, str], str],
    ) -> None:
        self.words = words
        self.loudness = loudness
        self.frames = frames
        self.overlaps = overlaps
        self.article = article

    def agreement(self, occurrence: SoundOccurrence) -> str:
        return self.words[occurrence.event].agreement

    def noun_phrase(self, occurrence: SoundOccurrence, context: str = "nom") -> str:
        words = self.words[occurrence.event]
        adjective = "" if occurrence.loudness is None else self.loudness[occurrence.loudness][words.agreement]
        phrase = " ".join(words.template.replace("{L}", adjective).split())
        return self.article(words, context) + phrase

    def part(self, part: Part, style: int, context: str) -> str:
        if len(part) == 1:
            return self.noun_phrase(part[0], context)
        first, second = part
        return self._fill(
            self.overlaps[style],
            {"a": (first, context), "b": (second, "nom")},
            lambda occurrence, slot_context: self.noun_phrase(occurrence, slot_context),
            lambda occurrence: self.agreement(occurrence),
        )

    def caption(self, scene: Scene, style: int) -> str:
        slots = {str(index + 1): (part, "nom") for index, part in enumerate(scene)}
        text = self._fill(
            self.frames[style][len(scene)],
            slots,
            lambda part, slot_context: self.part(part, style, slot_context),
            lambda part: self.agreement(part[0]),
        )
        return text[0].upper() + text[1:]

    def _fill(self, template: str, slots: dict, render: Callable, agreement_of: Callable) -> str:
        def agree(match: re.Match) -> str:
            forms = dict(zip(_ROMANCE_AGREEMENT, match.group(1).split(",")))
            return forms[agreement_of(slots[match.group(2)][0])]

        def fill(match: re.Match) -> str:
            value, default_context = slots[match.group(1)]
            context = match.group(2) or default_context
            return render(value, context)

        return _SLOT.sub(fill, _AGREEMENT.sub(agree, template))


class _GermanGrammar(_Grammar):
    """German noun phrases: indefinite article and adjective declension by gender and case."""

    _ARTICLES = {
        "m": {"nom": "ein", "acc": "einen", "dat": "einem"},
        "f": {"nom": "eine", "acc": "eine", "dat": "einer"},
        "n": {"nom": "ein", "acc": "ein", "dat": "einem"},
    }
    # Mixed declension after "ein", strong declension without article (mass nouns, plurals).
    _MIXED_ENDINGS = {
        "m": {"nom": "er", "acc": "en", "dat": "en"},
        "f": {"nom": "e", "acc": "e", "dat": "en"},
        "n": {"nom": "es", "acc": "es", "dat": "en"},
    }
    _STRONG_ENDINGS = {
        "m": {"nom": "er", "acc": "en", "dat": "em"},
        "f": {"nom": "e", "acc": "e", "dat": "er"},
        "n": {"nom": "es", "acc": "es", "dat": "em"},
        "pl": {"nom": "e", "acc": "e", "dat": "en"},
    }
    _LOUDNESS_STEMS = {"loud": "laut", "quiet": "leis"}

    def __init__(self, nouns: dict[str, tuple[str, str, tuple[str, ...], str, str]], **kwargs) -> None:
        super().__init__(words={}, loudness={}, article=lambda words, context: "", **kwargs)
        self.nouns = nouns

    def agreement(self, occurrence: SoundOccurrence) -> str:
        return self.nouns[occurrence.event][0]

    def noun_phrase(self, occurrence: SoundOccurrence, context: str = "nom") -> str:
        gender, kind, stems, nominative, dative = self.nouns[occurrence.event]
        case = context
        if kind == "count":
            words = [self._ARTICLES[gender][case]]
            ending = self._MIXED_ENDINGS[gender][case]
        else:
            words = []
            ending = self._STRONG_ENDINGS[gender][case]
        if occurrence.loudness is not None:
            stems = (self._LOUDNESS_STEMS[occurrence.loudness], *stems)
        # A stem ending in "*" is indeclinable ("rosa").
        words += [stem[:-1] if stem.endswith("*") else stem + ending for stem in stems]
        words.append(dative if case == "dat" else nominative)
        return " ".join(words)


def _english_article(words: _Words, context: str) -> str:
    return "a " if words.kind == "count" else ""


def _romance_article(masculine: str, feminine: str, mass: dict[str, str], plural: str) -> Callable:
    """Indefinite articles of French / Spanish / Catalan.

    Contexts: ``nom`` (the article alone), ``de`` ("d'un", "d'une"; the partitive and plural articles
    disappear after *de*: "de bruit blanc", "de bips") and ``que`` (French "ne ... que": "qu'une").
    """

    def article(words: _Words, context: str) -> str:
        if words.kind == "count":
            determiner = (feminine if words.agreement == "f" else masculine) + " "
        elif words.kind == "mass":
            determiner = mass[words.agreement]
        else:
            determiner = plural
        if context == "de" and words.kind != "count":
            determiner = ""
        if context in ("de", "que"):
            following = determiner or words.template
            return (context[:-1] + "'" if _VOWEL_START.match(following) else context + " ") + determiner
        return determiner

    return article


def _dutch_article(words: _Words, context: str) -> str:
    return "een " if words.kind == "count" else ""


def _no_article(words: _Words, context: str) -> str:
    return ""


_ENGLISH = _Grammar(
    words={
        "low_tone": _Words("{L} low tone", "-", "count"),
        "mid_tone": _Words("{L} mid-pitched tone", "-", "count"),
        "high_tone": _Words("{L} high-pitched tone", "-", "count"),
        "beeps": _Words("{L} repeated beeps", "-", "plural"),
        "chirp_up": _Words("{L} rising chirp", "-", "count"),
        "chirp_down": _Words("{L} falling chirp", "-", "count"),
        "white_noise": _Words("{L} white noise", "-", "mass"),
        "pink_noise": _Words("{L} pink noise", "-", "mass"),
        "brown_noise": _Words("{L} brown noise", "-", "mass"),
        "clicks": _Words("{L} rapid clicks", "-", "plural"),
        "buzz": _Words("{L} buzzing sound", "-", "count"),
        "siren": _Words("{L} siren", "-", "count"),
        "silence": _Words("silence", "-", "mass"),
    },
    loudness={"loud": {"-": "loud"}, "quiet": {"-": "quiet"}},
    frames=(
        {1: "{1}.", 2: "{1}, followed by {2}.", 3: "{1}, followed by {2} and then {3}."},
        {1: "Only {1}.", 2: "First {1}, then {2}.", 3: "First {1}, then {2}, and finally {3}."},
        {
            1: "A recording of {1}.",
            2: "A recording of {1}, then {2}.",
            3: "A recording of {1}, then {2}, then {3}.",
        },
        {
            1: "{1} from start to finish.",
            2: "{1}, and after that {2}.",
            3: "{1}, after that {2}, and finally {3}.",
        },
        {
            1: "The clip contains only {1}.",
            2: "The clip starts with {1} and ends with {2}.",
            3: "The clip starts with {1}, continues with {2} and ends with {3}.",
        },
    ),
    overlaps=(
        "{a} together with {b}",
        "{a} and {b} at the same time",
        "{a} mixed with {b}",
        "{a} over {b}",
        "{a} accompanied by {b}",
    ),
    article=_english_article,
)

_FRENCH = _Grammar(
    words={
        "low_tone": _Words("son grave et {L}", "m", "count"),
        "mid_tone": _Words("son {L} de fréquence moyenne", "m", "count"),
        "high_tone": _Words("son aigu et {L}", "m", "count"),
        "beeps": _Words("bips répétés et {L}", "mpl", "plural"),
        "chirp_up": _Words("sifflement montant et {L}", "m", "count"),
        "chirp_down": _Words("sifflement descendant et {L}", "m", "count"),
        "white_noise": _Words("bruit blanc {L}", "m", "mass"),
        "pink_noise": _Words("bruit rose {L}", "m", "mass"),
        "brown_noise": _Words("bruit brun {L}", "m", "mass"),
        "clicks": _Words("clics rapides et {L}", "mpl", "plural"),
        "buzz": _Words("bourdonnement {L}", "m", "count"),
        "siren": _Words("sirène {L}", "f", "count"),
        "silence": _Words("silence", "m", "mass"),
    },
    loudness=_romance_loudness(
        ("fort", "forte", "forts", "fortes"), ("faible", "faible", "faibles", "faibles")
    ),
    frames=(
        {
            1: "{1}.",
            2: "{1}, [suivi,suivie,suivis,suivies:1] {2:de}.",
            3: "{1}, [suivi,suivie,suivis,suivies:1] {2:de}, puis {3}.",
        },
        {1: "Seulement {1}.", 2: "D'abord {1}, puis {2}.", 3: "D'abord {1}, puis {2}, et enfin {3}."},
        {
            1: "Un enregistrement {1:de}.",
            2: "Un enregistrement {1:de}, puis {2:de}.",
            3: "Un enregistrement {1:de}, puis {2:de}, puis {3:de}.",
        },
        {1: "{1} du début à la fin.", 2: "{1}, et après cela {2}.", 3: "{1}, après cela {2}, et enfin {3}."},
        {
            1: "L'extrait ne contient {1:que}.",
            2: "L'extrait commence par {1} et se termine par {2}.",
            3: "L'extrait commence par {1}, continue avec {2} et se termine par {3}.",
        },
    ),
    overlaps=(
        "{a} avec {b}",
        "{a} et {b} en même temps",
        "{a} [mêlé,mêlée,mêlés,mêlées:a] à {b}",
        "{a} par-dessus {b}",
        "{a} [accompagné,accompagnée,accompagnés,accompagnées:a] {b:de}",
    ),
    article=_romance_article("un", "une", {"m": "du ", "f": "de la "}, "des "),
)

_GERMAN = _GermanGrammar(
    nouns={
        "low_tone": ("m", "count", ("tief",), "Ton", "Ton"),
        "mid_tone": ("m", "count", ("mittelhoh",), "Ton", "Ton"),
        "high_tone": ("m", "count", ("hoh",), "Ton", "Ton"),
        "beeps": ("pl", "plural", ("wiederholt",), "Pieptöne", "Pieptönen"),
        "chirp_up": ("m", "count", ("ansteigend",), "Pfeifton", "Pfeifton"),
        "chirp_down": ("m", "count", ("abfallend",), "Pfeifton", "Pfeifton"),
        "white_noise": ("n", "mass", ("weiß",), "Rauschen", "Rauschen"),
        "pink_noise": ("n", "mass", ("rosa*",), "Rauschen", "Rauschen"),
        "brown_noise": ("n", "mass", ("braun",), "Rauschen", "Rauschen"),
        "clicks": ("pl", "plural", ("schnell",), "Klicks", "Klicks"),
        "buzz": ("n", "count", (), "Brummen", "Brummen"),
        "siren": ("f", "count", (), "Sirene", "Sirene"),
        "silence": ("f", "mass", (), "Stille", "Stille"),
    },
    frames=(
        {1: "{1}.", 2: "{1}, gefolgt von {2:dat}.", 3: "{1}, gefolgt von {2:dat}, und dann {3}."},
        {1: "Nur {1}.", 2: "Zuerst {1}, dann {2}.", 3: "Zuerst {1}, dann {2} und schließlich {3}."},
        {
            1: "Eine Aufnahme von {1:dat}.",
            2: "Eine Aufnahme von {1:dat}, danach von {2:dat}.",
            3: "Eine Aufnahme von {1:dat}, danach von {2:dat} und dann von {3:dat}.",
        },
        {
            1: "{1} von Anfang bis Ende.",
            2: "{1}, und im Anschluss {2}.",
            3: "{1}, im Anschluss {2} und schließlich {3}.",
        },
        {
            1: "Der Clip enthält nur {1:acc}.",
            2: "Der Clip beginnt mit {1:dat} und endet mit {2:dat}.",
            3: "Der Clip beginnt mit {1:dat}, geht mit {2:dat} weiter und endet mit {3:dat}.",
        },
    ),
    overlaps=(
        "{a} zusammen mit {b:dat}",
        "{a} und gleichzeitig {b}",
        "{a} gemischt mit {b:dat}",
        "{a} über {b:dat}",
        "{a} begleitet von {b:dat}",
    ),
)

_SPANISH = _Grammar(
    words={
        "low_tone": _Words("tono grave y {L}", "m", "count"),
        "mid_tone": _Words("tono {L} de frecuencia media", "m", "count"),
        "high_tone": _Words("tono agudo y {L}", "m", "count"),
        "beeps": _Words("pitidos repetidos y {L}", "mpl", "plural"),
        "chirp_up": _Words("silbido ascendente y {L}", "m", "count"),
        "chirp_down": _Words("silbido descendente y {L}", "m", "count"),
        "white_noise": _Words("ruido blanco {L}", "m", "mass"),
        "pink_noise": _Words("ruido rosa {L}", "m", "mass"),
        "brown_noise": _Words("ruido marrón {L}", "m", "mass"),
        "clicks": _Words("clics rápidos y {L}", "mpl", "plural"),
        "buzz": _Words("zumbido {L}", "m", "count"),
        "siren": _Words("sirena {L}", "f", "count"),
        "silence": _Words("silencio", "m", "mass"),
    },
    loudness=_romance_loudness(
        ("fuerte", "fuerte", "fuertes", "fuertes"), ("suave", "suave", "suaves", "suaves")
    ),
    frames=(
        {
            1: "{1}.",
            2: "{1}, [seguido,seguida,seguidos,seguidas:1] de {2}.",
            3: "{1}, [seguido,seguida,seguidos,seguidas:1] de {2} y luego {3}.",
        },
        {1: "Solo {1}.", 2: "Primero {1}, luego {2}.", 3: "Primero {1}, luego {2} y, por último, {3}."},
        {
            1: "Una grabación de {1}.",
            2: "Una grabación de {1} y luego de {2}.",
            3: "Una grabación de {1}, luego de {2} y después de {3}.",
        },
        {
            1: "{1} de principio a fin.",
            2: "{1} y, después de eso, {2}.",
            3: "{1}, después {2} y, por último, {3}.",
        },
        {
            1: "El clip solo contiene {1}.",
            2: "El clip empieza con {1} y termina con {2}.",
            3: "El clip empieza con {1}, continúa con {2} y termina con {3}.",
        },
    ),
    overlaps=(
        "{a} junto con {b}",
        "{a} y {b} al mismo tiempo",
        "{a} [mezclado,mezclada,mezclados,mezcladas:a] con {b}",
        "{a} sobre {b}",
        "{a} [acompañado,acompañada,acompañados,acompañadas:a] de {b}",
    ),
    article=_romance_article("un", "una", {"m": "", "f": ""}, ""),
)

_DUTCH = _Grammar(
    words={
        "low_tone": _Words("{L} lage toon", "e", "count"),
        "mid_tone": _Words("{L} middelhoge toon", "e", "count"),
        "high_tone": _Words("{L} hoge toon", "e", "count"),
        "beeps": _Words("herhaalde {L} piepjes", "e", "plural"),
        "chirp_up": _Words("{L} stijgende fluittoon", "e", "count"),
        "chirp_down": _Words("{L} dalende fluittoon", "e", "count"),
        "white_noise": _Words("{L} witte ruis", "e", "mass"),
        "pink_noise": _Words("{L} roze ruis", "e", "mass"),
        "brown_noise": _Words("{L} bruine ruis", "e", "mass"),
        "clicks": _Words("snelle {L} klikken", "e", "plural"),
        # "een hard zoemend geluid": an indefinite neuter singular takes the bare adjective.
        "buzz": _Words("{L} zoemend geluid", "bare", "count"),
        "siren": _Words("{L} sirene", "e", "count"),
        "silence": _Words("stilte", "e", "mass"),
    },
    loudness={"loud": {"e": "harde", "bare": "hard"}, "quiet": {"e": "zachte", "bare": "zacht"}},
    frames=(
        {1: "{1}.", 2: "{1}, gevolgd door {2}.", 3: "{1}, gevolgd door {2} en dan {3}."},
        {1: "Alleen {1}.", 2: "Eerst {1}, dan {2}.", 3: "Eerst {1}, dan {2} en ten slotte {3}."},
        {
            1: "Een opname van {1}.",
            2: "Een opname van {1}, daarna {2}.",
            3: "Een opname van {1}, daarna {2}, daarna {3}.",
        },
        {
            1: "{1} van begin tot eind.",
            2: "{1}, en vervolgens {2}.",
            3: "{1}, vervolgens {2} en ten slotte {3}.",
        },
        {
            1: "De clip bevat alleen {1}.",
            2: "De clip begint met {1} en eindigt met {2}.",
            3: "De clip begint met {1}, gaat verder met {2} en eindigt met {3}.",
        },
    ),
    overlaps=(
        "{a} samen met {b}",
        "{a} en {b} tegelijk",
        "{a} gemengd met {b}",
        "{a} bovenop {b}",
        "{a} begeleid door {b}",
    ),
    article=_dutch_article,
)

_CATALAN = _Grammar(
    words={
        "low_tone": _Words("to greu i {L}", "m", "count"),
        "mid_tone": _Words("to {L} de freqüència mitjana", "m", "count"),
        "high_tone": _Words("to agut i {L}", "m", "count"),
        "beeps": _Words("bips repetits i {L}", "mpl", "plural"),
        "chirp_up": _Words("xiulet ascendent i {L}", "m", "count"),
        "chirp_down": _Words("xiulet descendent i {L}", "m", "count"),
        "white_noise": _Words("soroll blanc {L}", "m", "mass"),
        "pink_noise": _Words("soroll rosa {L}", "m", "mass"),
        "brown_noise": _Words("soroll marró {L}", "m", "mass"),
        "clicks": _Words("clics ràpids i {L}", "mpl", "plural"),
        "buzz": _Words("brunzit {L}", "m", "count"),
        "siren": _Words("sirena {L}", "f", "count"),
        "silence": _Words("silenci", "m", "mass"),
    },
    loudness=_romance_loudness(("fort", "forta", "forts", "fortes"), ("suau", "suau", "suaus", "suaus")),
    frames=(
        {
            1: "{1}.",
            2: "{1}, [seguit,seguida,seguits,seguides:1] {2:de}.",
            3: "{1}, [seguit,seguida,seguits,seguides:1] {2:de} i després {3}.",
        },
        {1: "Només {1}.", 2: "Primer {1}, després {2}.", 3: "Primer {1}, després {2} i, finalment, {3}."},
        {
            1: "Un enregistrament {1:de}.",
            2: "Un enregistrament {1:de} i després {2:de}.",
            3: "Un enregistrament {1:de}, després {2:de} i després {3:de}.",
        },
        {
            1: "{1} de principi a fi.",
            2: "{1} i, a continuació, {2}.",
            3: "{1}, a continuació {2} i, finalment, {3}.",
        },
        {
            1: "El clip només conté {1}.",
            2: "El clip comença amb {1} i acaba amb {2}.",
            3: "El clip comença amb {1}, continua amb {2} i acaba amb {3}.",
        },
    ),
    overlaps=(
        "{a} juntament amb {b}",
        "{a} i {b} alhora",
        "{a} [barrejat,barrejada,barrejats,barrejades:a] amb {b}",
        "{a} per sobre {b:de}",
        "{a} [acompanyat,acompanyada,acompanyats,acompanyades:a] {b:de}",
    ),
    article=_romance_article("un", "una", {"m": "", "f": ""}, ""),
)

_JAPANESE = _Grammar(
    words={
        "low_tone": _Words("{L}低い音", "-", "count"),
        "mid_tone": _Words("{L}中音域の音", "-", "count"),
        "high_tone": _Words("{L}高い音", "-", "count"),
        "beeps": _Words("繰り返される{L}ビープ音", "-", "count"),
        "chirp_up": _Words("音程が上がっていく{L}音", "-", "count"),
        "chirp_down": _Words("音程が下がっていく{L}音", "-", "count"),
        "white_noise": _Words("{L}ホワイトノイズ", "-", "count"),
        "pink_noise": _Words("{L}ピンクノイズ", "-", "count"),
        "brown_noise": _Words("{L}ブラウンノイズ", "-", "count"),
        "clicks": _Words("連続する{L}クリック音", "-", "count"),
        "buzz": _Words("ブーンという{L}音", "-", "count"),
        "siren": _Words("{L}サイレンの音", "-", "count"),
        "silence": _Words("無音", "-", "count"),
    },
    loudness={"loud": {"-": "大きな"}, "quiet": {"-": "小さな"}},
    frames=(
        {1: "{1}。", 2: "{1}、続いて{2}。", 3: "{1}、続いて{2}、そして{3}。"},
        {1: "{1}だけ。", 2: "まず{1}、次に{2}。", 3: "まず{1}、次に{2}、最後に{3}。"},
        {1: "{1}の録音。", 2: "{1}、それから{2}が続く録音。", 3: "{1}、それから{2}、さらに{3}が続く録音。"},
        {1: "最初から最後まで{1}。", 2: "{1}、その後{2}。", 3: "{1}、その後{2}、最後に{3}。"},
        {
            1: "{1}だけを含むクリップ。",
            2: "{1}で始まり、{2}で終わるクリップ。",
            3: "{1}で始まり、{2}が続き、{3}で終わるクリップ。",
        },
    ),
    overlaps=(
        "{b}と一緒に鳴る{a}",
        "同時に鳴る{a}と{b}",
        "{b}が混ざった{a}",
        "{b}に重なる{a}",
        "{b}を伴う{a}",
    ),
    article=_no_article,
)

_CHINESE = _Grammar(
    words={
        "low_tone": _Words("{L}低频音", "-", "count"),
        "mid_tone": _Words("{L}中频音", "-", "count"),
        "high_tone": _Words("{L}高频音", "-", "count"),
        "beeps": _Words("{L}连续哔哔声", "-", "count"),
        "chirp_up": _Words("{L}上升扫频音", "-", "count"),
        "chirp_down": _Words("{L}下降扫频音", "-", "count"),
        "white_noise": _Words("{L}白噪声", "-", "count"),
        "pink_noise": _Words("{L}粉红噪声", "-", "count"),
        "brown_noise": _Words("{L}布朗噪声", "-", "count"),
        "clicks": _Words("{L}快速咔哒声", "-", "count"),
        "buzz": _Words("{L}嗡嗡声", "-", "count"),
        "siren": _Words("{L}警笛声", "-", "count"),
        "silence": _Words("寂静", "-", "count"),
    },
    loudness={"loud": {"-": "响亮的"}, "quiet": {"-": "轻微的"}},
    frames=(
        {1: "{1}。", 2: "{1}，随后是{2}。", 3: "{1}，随后是{2}，然后是{3}。"},
        {1: "只有{1}。", 2: "首先是{1}，然后是{2}。", 3: "首先是{1}，然后是{2}，最后是{3}。"},
        {
            1: "一段{1}的录音。",
            2: "一段录音：先是{1}，接着是{2}。",
            3: "一段录音：先是{1}，接着是{2}，再接着是{3}。",
        },
        {1: "从头到尾都是{1}。", 2: "{1}，之后是{2}。", 3: "{1}，之后是{2}，最后是{3}。"},
        {
            1: "这段音频只包含{1}。",
            2: "这段音频以{1}开始，以{2}结束。",
            3: "这段音频以{1}开始，接着是{2}，最后以{3}结束。",
        },
    ),
    overlaps=("{a}连同{b}", "同时响起的{a}和{b}", "混有{b}的{a}", "叠加在{b}上的{a}", "伴随着{b}的{a}"),
    article=_no_article,
)

GRAMMARS: dict[str, _Grammar] = {
    "eng": _ENGLISH,
    "fra": _FRENCH,
    "deu": _GERMAN,
    "spa": _SPANISH,
    "nld": _DUTCH,
    "cat": _CATALAN,
    "jpn": _JAPANESE,
    "zho": _CHINESE,
}


def caption_scene(scene: Scene, language: str = "eng") -> list[str]:
    """The :data:`NUM_CAPTION_STYLES` captions of ``scene`` in ``language`` (ISO 639-3), style by style.

    Raises:
        ValueError: unknown language, an empty scene or one of more than three parts, a part of more
            than two events, silence overlapping another event, an unknown event or loudness.
    """
    if language not in GRAMMARS:
        raise ValueError(f"No SynthCaps grammar for language {language!r}; available: {list(GRAMMARS)}.")
    _check_scene(scene)
    grammar = GRAMMARS[language]
    return [grammar.caption(scene, style) for style in range(NUM_CAPTION_STYLES)]


def event_phrase(event: str) -> str:
    """The English noun phrase of ``event`` without loudness, e.g. ``"a siren"``, ``"white noise"``.

    Meant for zero-shot label prompts (``f"the sound of {event_phrase(label)}"``).
    """
    if event not in _ENGLISH.words:
        raise ValueError(f"Unknown SynthCaps sound event {event!r}; known events: {list(_ENGLISH.words)}.")
    return _ENGLISH.noun_phrase(SoundOccurrence(event, None))


def _check_scene(scene: Scene) -> None:
    known = _ENGLISH.words
    if not 1 <= len(scene) <= 3:
        raise ValueError(f"A SynthCaps scene has 1 to 3 parts, got {len(scene)}: {scene!r}.")
    for part in scene:
        if not 1 <= len(part) <= 2:
            raise ValueError(f"A SynthCaps scene part has 1 or 2 overlapping events, got {part!r}.")
        for occurrence in part:
            if occurrence.event not in known:
                raise ValueError(
                    f"Unknown SynthCaps sound event {occurrence.event!r}; known events: {list(known)}."
                )
            expected = (None,) if occurrence.event == "silence" else LOUDNESS_LEVELS
            if occurrence.loudness not in expected:
                raise ValueError(
                    f"Sound event {occurrence.event!r} needs loudness in {list(expected)}, got {occurrence.loudness!r}."
                )
        if len(part) == 2 and any(occurrence.event == "silence" for occurrence in part):
            raise ValueError(f"Silence cannot overlap another event: {part!r}.")

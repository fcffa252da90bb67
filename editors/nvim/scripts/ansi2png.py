#!/usr/bin/env python3
"""Render a `tmux capture-pane -e -p` capture (text with SGR escapes) to a PNG.

    ansi2png.py CAPTURE.txt OUT.png [--cols 160] [--rows 48] [--size 15]

Needs Pillow (and fontTools for the glyph fallback); fonts from Debian's fonts-dejavu-core.
Cells are laid out on a fixed grid; a glyph missing from DejaVu Sans Mono is drawn with
DejaVu Sans, centered in its cell.
"""
import argparse
import re
import unicodedata

from PIL import Image, ImageDraw, ImageFont

try:
    from fontTools.ttLib import TTFont
except ImportError:  # pragma: no cover - fallback without fontTools
    TTFont = None

FONT_DIR = "/usr/share/fonts/truetype/dejavu/"
MONO = {
    (False, False): "DejaVuSansMono.ttf",
    (True, False): "DejaVuSansMono-Bold.ttf",
    (False, True): "DejaVuSansMono-Oblique.ttf",
    (True, True): "DejaVuSansMono-BoldOblique.ttf",
}
FALLBACK = "DejaVuSans.ttf"

# xterm's 16 colors (a dark palette that suits the default Neovim colorscheme).
BASE16 = [
    (0x07, 0x08, 0x0D), (0xE0, 0x6C, 0x75), (0x98, 0xC3, 0x79), (0xE5, 0xC0, 0x7B),
    (0x61, 0xAF, 0xEF), (0xC6, 0x78, 0xDD), (0x56, 0xB6, 0xC2), (0xAB, 0xB2, 0xBF),
    (0x5C, 0x63, 0x70), (0xE0, 0x6C, 0x75), (0x98, 0xC3, 0x79), (0xE5, 0xC0, 0x7B),
    (0x61, 0xAF, 0xEF), (0xC6, 0x78, 0xDD), (0x56, 0xB6, 0xC2), (0xFF, 0xFF, 0xFF),
]
DEFAULT_FG = (0xE0, 0xE2, 0xEA)
DEFAULT_BG = (0x14, 0x16, 0x1B)


def xterm256(n):
    if n < 16:
        return BASE16[n]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return (steps[n // 36], steps[(n // 6) % 6], steps[n % 6])
    v = 8 + (n - 232) * 10
    return (v, v, v)


class Cell:
    __slots__ = ("ch", "fg", "bg", "bold", "italic", "underline", "reverse", "wide_tail")

    def __init__(self):
        self.ch, self.fg, self.bg = " ", None, None
        self.bold = self.italic = self.underline = self.reverse = False
        self.wide_tail = False


def parse(text, cols, rows):
    grid = [[Cell() for _ in range(cols)] for _ in range(rows)]
    state = dict(fg=None, bg=None, bold=False, italic=False, underline=False, reverse=False)
    sgr = re.compile(r"\x1b\[([0-9;:]*)m")
    for y, line in enumerate(text.split("\n")[:rows]):
        x, i = 0, 0
        while i < len(line) and x < cols:
            m = sgr.match(line, i)
            if m:
                apply_sgr(state, m.group(1))
                i = m.end()
                continue
            if line[i] == "\x1b":  # another escape: skip it
                j = re.match(r"\x1b[\[\]][^a-zA-Z]*[a-zA-Z]?", line[i:])
                i += j.end() if j else 1
                continue
            ch = line[i]
            i += 1
            if unicodedata.combining(ch):
                continue
            cell = grid[y][x]
            cell.ch = ch
            for k, v in state.items():
                setattr(cell, k, v)
            width = 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
            if width == 2 and x + 1 < cols:
                tail = grid[y][x + 1]
                tail.wide_tail = True
                for k, v in state.items():
                    setattr(tail, k, v)
            x += width
    return grid


def apply_sgr(state, params):
    codes = [int(p) if p.isdigit() else 0 for p in re.split("[;:]", params or "0")]
    i = 0
    while i < len(codes):
        c = codes[i]
        if c == 0:
            state.update(fg=None, bg=None, bold=False, italic=False, underline=False, reverse=False)
        elif c == 1:
            state["bold"] = True
        elif c == 3:
            state["italic"] = True
        elif c == 4:
            state["underline"] = True
        elif c == 7:
            state["reverse"] = True
        elif c == 22:
            state["bold"] = False
        elif c == 23:
            state["italic"] = False
        elif c == 24:
            state["underline"] = False
        elif c == 27:
            state["reverse"] = False
        elif 30 <= c <= 37:
            state["fg"] = BASE16[c - 30]
        elif 90 <= c <= 97:
            state["fg"] = BASE16[c - 90 + 8]
        elif 40 <= c <= 47:
            state["bg"] = BASE16[c - 40]
        elif 100 <= c <= 107:
            state["bg"] = BASE16[c - 100 + 8]
        elif c == 39:
            state["fg"] = None
        elif c == 49:
            state["bg"] = None
        elif c in (38, 48) and i + 1 < len(codes):
            key = "fg" if c == 38 else "bg"
            if codes[i + 1] == 5 and i + 2 < len(codes):
                state[key] = xterm256(codes[i + 2])
                i += 2
            elif codes[i + 1] == 2 and i + 4 < len(codes):
                state[key] = tuple(codes[i + 2 : i + 5])
                i += 4
        i += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("capture")
    ap.add_argument("out")
    ap.add_argument("--cols", type=int, default=160)
    ap.add_argument("--rows", type=int, default=48)
    ap.add_argument("--size", type=int, default=15)
    ap.add_argument("--pad", type=int, default=14)
    args = ap.parse_args()

    text = open(args.capture, encoding="utf-8", errors="replace").read()
    grid = parse(text, args.cols, args.rows)

    fonts = {k: ImageFont.truetype(FONT_DIR + v, args.size) for k, v in MONO.items()}
    fallback = ImageFont.truetype(FONT_DIR + FALLBACK, args.size)
    cmap = TTFont(FONT_DIR + MONO[(False, False)]).getBestCmap() if TTFont else None
    ascent, descent = fonts[(False, False)].getmetrics()
    cw = round(fonts[(False, False)].getlength("M"))
    ch = ascent + descent + 3

    pad = args.pad
    img = Image.new("RGB", (args.cols * cw + 2 * pad, args.rows * ch + 2 * pad), DEFAULT_BG)
    draw = ImageDraw.Draw(img)
    for y, row in enumerate(grid):
        for x, cell in enumerate(row):
            fg, bg = cell.fg or DEFAULT_FG, cell.bg or DEFAULT_BG
            if cell.reverse:
                fg, bg = bg, fg
            px, py = pad + x * cw, pad + y * ch
            if bg != DEFAULT_BG:
                draw.rectangle([px, py, px + cw - 1, py + ch - 1], fill=bg)
            if cell.wide_tail or cell.ch == " ":
                continue
            cp = ord(cell.ch)
            if 0x2500 <= cp <= 0x257F and cell.ch in "─━│┃":
                # Box drawing lines span the whole cell so rules join up.
                mid_y, mid_x = py + ch // 2, px + cw // 2
                w = 2 if cell.ch in "━┃" else 1
                if cell.ch in "─━":
                    draw.rectangle([px, mid_y - w // 2, px + cw, mid_y - w // 2 + w - 1], fill=fg)
                else:
                    draw.rectangle([mid_x - w // 2, py, mid_x - w // 2 + w - 1, py + ch], fill=fg)
                continue
            font = fonts[(cell.bold, cell.italic)]
            if cmap is not None and cp not in cmap:
                font = fallback
                glyph_w = font.getlength(cell.ch)
                draw.text((px + (cw - glyph_w) / 2, py + 1), cell.ch, font=font, fill=fg)
            else:
                draw.text((px, py + 1), cell.ch, font=font, fill=fg)
            if cell.underline:
                draw.line([px, py + ascent + 2, px + cw, py + ascent + 2], fill=fg)
    img.save(args.out)


if __name__ == "__main__":
    main()

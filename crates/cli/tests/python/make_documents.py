"""Generates the real-document fixtures the tests ingest (and bench/extract.sh measures).

    python make_documents.py OUT_DIR

writes into OUT_DIR/docs (and the reference to OUT_DIR/truth.json):
  report.pdf     4 pages: running header and footer, a title, numbered section headings (larger
                 font, also in the outline), a word hyphenated at a line end, a two-column page,
                 a table, a figure with a caption, a Russian page and a Chinese page
  report.docx    the same kinds of content: headings, a list, a table, a picture with alt text
                 and a caption
  slides.pptx    three slides with titles, bullets and speaker notes; a picture, a table
  page.html      navigation, a header and footer, h1-h3, a table, an image
  report.odt     OpenDocument text written by hand (headings, a list, a table, a frame with an
                 image and its caption)
  budget.xlsx    two sheets (a table with a date column; an empty sheet)
  stock.csv      a table with a quoted field holding a comma
  bad/encrypted.pdf  a password-protected PDF
  bad/scan.pdf       one page that is only an image (no text layer)
  bad/truncated.pdf  report.pdf cut at 40% of its bytes
  bad/onebadpage.pdf report.pdf whose page 2 names fonts that are not fonts (the rest reads)
  bad/notzip.docx    text that is not a zip
  bad/bomb.docx      a zip whose document.xml inflates to 300 MB
  truth.json     what was put where: for every fixture the text of each page or slide (the
                 reference for the character error rate and for page checks), and the figure
                 and table captions

Needs fpdf2, python-docx, python-pptx (with XlsxWriter), pypdf and Pillow, plus the DejaVu and WenQuanYi Micro
Hei fonts (Debian's fonts-dejavu-core and fonts-wqy-microhei).
"""

import io
import json
import os
import sys
import zipfile

from fpdf import FPDF
from PIL import Image, ImageDraw

DEJAVU = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
DEJAVU_BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
WQY = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"

HEADER = "Northwind Annual Report 2025"

# Page contents: (kind, payload) in reading order. Lines of a paragraph are placed exactly as
# given, so the hyphen at "retrie-" is a real line-end hyphen.
OVERVIEW = [
    "Northwind Traders sells kitchen equipment in twelve countries. This report covers the",
    "fiscal year that ended on 30 September 2025 and the retrie-",
    "val system the company built for its service manuals.",
]
OVERVIEW_2 = [
    "The board approved a dividend of 41 cents per share, paid in November.",
]
LEFT = [
    "Revenue grew 3% in the third quarter,",
    "to 812 million euros, driven by the",
    "Nordic region and by the new line of",
    "induction hobs launched in April.",
]
RIGHT = [
    "Operating costs fell 2% because the",
    "Tilburg warehouse was automated and",
    "freight contracts were renegotiated",
    "with two carriers in the spring.",
]
TABLE = [
    ["Region", "Q3 revenue", "Growth"],
    ["Nordics", "214 million", "7%"],
    ["Benelux", "187 million", "2%"],
    ["Iberia", "96 million", "-1%"],
]
FIGURE_REF = ["As Figure 1 shows, the Nordics grew fastest of all regions."]
CAPTION = "Figure 1: Quarterly revenue of the Northwind group by region."
RU_TITLE = "3 Обзор рынка"
RU = [
    "Рынок кухонного оборудования в России сократился на 4% за год.",
    "Компания закрыла склад в Казани и перевела поставки в Москву.",
]
RU_SUB = "3.1 Склады"
RU_2 = ["Новый склад в Туле открылся в марте."]
ZH_TITLE = "4 市场概况"
ZH = [
    "北风贸易公司在中国的销售额增长了百分之九。",
    "上海仓库于二零二五年六月开始运营。",
]


def chart_png(path, w=320, h=160, label=True):
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    for i, v in enumerate([120, 100, 60]):
        d.rectangle([20 + i * 100, h - 10 - v, 80 + i * 100, h - 10], fill=(60, 90 + 50 * i, 160))
    img.save(path)
    return path


class Report(FPDF):
    def header(self):
        self.set_font("dejavu", size=8)
        self.set_xy(15, 8)
        self.cell(0, 5, HEADER)

    def footer(self):
        self.set_font("dejavu", size=8)
        self.set_xy(15, -12)
        self.cell(0, 5, f"Page {self.page_no()} of 4")


def lines(pdf, x, y, rows, size=11, font="dejavu", step=6):
    pdf.set_font(font, size=size)
    for r in rows:
        pdf.text(x, y, r)
        y += step
    return y


def heading(pdf, y, text, size=16, font="bold", level=0):
    pdf.set_y(y - 5)
    pdf.start_section(text, level=level)
    pdf.set_font(font, size=size)
    pdf.text(15, y, text)
    return y + 10


def make_pdf(out, img):
    pdf = Report(unit="mm", format="A4")
    pdf.add_font("dejavu", "", DEJAVU)
    pdf.add_font("bold", "", DEJAVU_BOLD)
    pdf.add_font("dejavu", "B", DEJAVU_BOLD)
    pdf.add_font("wqy", "", WQY, collection_font_number=0)
    pdf.set_auto_page_break(False)
    truth = []

    pdf.add_page()
    pdf.set_font("bold", size=22)
    pdf.text(15, 30, "Northwind Annual Report")
    y = heading(pdf, 45, "1 Overview")
    y = lines(pdf, 15, y, OVERVIEW) + 4
    y = lines(pdf, 15, y, OVERVIEW_2)
    truth.append(
        ["Northwind Annual Report", "1 Overview", join_lines(OVERVIEW), join_lines(OVERVIEW_2)]
    )

    pdf.add_page()
    y = heading(pdf, 25, "2 Revenue")
    # The two columns are drawn row by row (left line, right line, ...), as many generators
    # do, so reading order has to come from the layout, not from the drawing order.
    pdf.set_font("dejavu", size=11)
    for left, right in zip(LEFT, RIGHT):
        pdf.text(15, y, left)
        pdf.text(110, y, right)
        y += 6
    y += 6
    pdf.set_font("dejavu", size=10)
    pdf.set_xy(15, y)
    with pdf.table(col_widths=(40, 40, 30), width=110, align="LEFT") as table:
        for row in TABLE:
            r = table.row()
            for cell in row:
                r.cell(cell)
    y = pdf.get_y() + 8
    y = lines(pdf, 15, y, FIGURE_REF) + 2
    pdf.image(img, x=15, y=y, w=80)
    y += 45
    pdf.set_font("dejavu", size=9)
    pdf.text(15, y, CAPTION)
    truth.append(
        ["2 Revenue", join_lines(LEFT), join_lines(RIGHT)]
        + [" ".join(r) for r in TABLE]
        + [join_lines(FIGURE_REF), CAPTION]
    )

    pdf.add_page()
    y = heading(pdf, 25, RU_TITLE)
    y = lines(pdf, 15, y, RU) + 6
    # A subsection set at the body size (bold): a heading only the outline tells.
    pdf.set_y(y - 5)
    pdf.start_section(RU_SUB, level=1)
    pdf.set_font("bold", size=11)
    pdf.text(15, y, RU_SUB)
    y += 8
    lines(pdf, 15, y, RU_2)
    truth.append([RU_TITLE, join_lines(RU), RU_SUB, join_lines(RU_2)])

    pdf.add_page()
    y = heading(pdf, 25, ZH_TITLE, font="wqy")
    lines(pdf, 15, y, ZH, font="wqy")
    truth.append([ZH_TITLE, "".join(ZH)])

    pdf.output(os.path.join(out, "report.pdf"))
    return [{"page": i + 1, "text": "\n".join(t)} for i, t in enumerate(truth)]


def join_lines(rows):
    text = ""
    for r in rows:
        if text.endswith("-"):
            text = text[:-1] + r
        elif text:
            text += " " + r
        else:
            text = r
    return text


def make_docx(out, img):
    import docx
    from docx.shared import Inches

    d = docx.Document()
    d.core_properties.title = "Northwind Annual Report"
    d.add_heading("Northwind Annual Report", level=0)
    d.add_heading("1 Overview", level=1)
    d.add_paragraph(join_lines(OVERVIEW))
    d.add_paragraph("The year in three points:")
    for item in ["Revenue grew 3%.", "Costs fell 2%.", "A dividend of 41 cents."]:
        d.add_paragraph(item, style="List Bullet")
    d.add_heading("2 Revenue", level=1)
    d.add_paragraph(join_lines(LEFT))
    t = d.add_table(rows=len(TABLE), cols=3)
    for i, row in enumerate(TABLE):
        for j, cell in enumerate(row):
            t.cell(i, j).text = cell
    d.add_paragraph(join_lines(FIGURE_REF))
    d.add_picture(img, width=Inches(3))
    # alt text: the picture's <wp:docPr descr="...">
    docpr = d.inline_shapes[0]._inline.docPr
    docpr.set("descr", "Bar chart of quarterly revenue by region")
    d.add_paragraph(CAPTION, style="Caption")
    d.add_heading(RU_TITLE, level=1)
    d.add_paragraph(join_lines(RU))
    d.save(os.path.join(out, "report.docx"))


def make_pptx(out, img):
    from pptx import Presentation
    from pptx.util import Inches

    p = Presentation()
    s = p.slides.add_slide(p.slide_layouts[1])
    s.shapes.title.text = "Northwind in 2025"
    body = s.placeholders[1].text_frame
    body.text = "Revenue grew 3% to 812 million euros"
    body.add_paragraph().text = "Operating costs fell 2%"
    s.notes_slide.notes_text_frame.text = "Mention the Tilburg warehouse automation."

    s = p.slides.add_slide(p.slide_layouts[5])
    s.shapes.title.text = "Revenue by region"
    pic = s.shapes.add_picture(img, Inches(1), Inches(1.8), width=Inches(4))
    pic._element.nvPicPr.cNvPr.set("descr", "Bar chart of quarterly revenue by region")
    tb = s.shapes.add_textbox(Inches(1), Inches(4.2), Inches(6), Inches(0.5))
    tb.text_frame.text = CAPTION

    s = p.slides.add_slide(p.slide_layouts[5])
    s.shapes.title.text = "Regional table"
    shape = s.shapes.add_table(len(TABLE), 3, Inches(1), Inches(2), Inches(6), Inches(2))
    for i, row in enumerate(TABLE):
        for j, cell in enumerate(row):
            shape.table.cell(i, j).text = cell
    s.notes_slide.notes_text_frame.text = "Iberia shrank by one percent."
    p.save(os.path.join(out, "slides.pptx"))
    return [
        {"slide": 1, "text": "Northwind in 2025\nRevenue grew 3% to 812 million euros\nOperating costs fell 2%\nMention the Tilburg warehouse automation."},
        {"slide": 2, "text": "Revenue by region\n" + CAPTION},
        {"slide": 3, "text": "Regional table\n" + "\n".join(" ".join(r) for r in TABLE) + "\nIberia shrank by one percent."},
    ]


HTML = """<!doctype html>
<html><head><title>Northwind support</title></head>
<body>
<nav><a href="/">Home</a> | <a href="/shop">Shop</a> | <a href="/contact">Contact us</a></nav>
<header><p>Northwind Traders customer portal</p></header>
<main>
<h1>Induction hobs</h1>
<p>Our induction hobs heat a pan in under ninety seconds.</p>
<h2>Cleaning</h2>
<p>Wipe the glass with a damp cloth once the surface has cooled below 40 degrees.</p>
<h3>Error codes</h3>
<table>
<tr><th>Code</th><th>Meaning</th></tr>
<tr><td>E1</td><td>No pan detected on the cooking zone</td></tr>
<tr><td>E4</td><td>Overheating of the power module</td></tr>
</table>
<figure><img src="hob-diagram.png" alt="Diagram of the four cooking zones"><figcaption>Figure 2: The cooking zones seen from above.</figcaption></figure>
</main>
<footer><p>Copyright 2025 Northwind Traders. All rights reserved.</p></footer>
</body></html>
"""


def make_sheets(out):
    import datetime
    import xlsxwriter

    wb = xlsxwriter.Workbook(os.path.join(out, "budget.xlsx"))
    ws = wb.add_worksheet("Regions")
    dates = wb.add_format({"num_format": "yyyy-mm-dd"})
    ws.write_row(0, 0, ["Region", "Budget", "Approved"])
    for i, (region, budget) in enumerate([("Nordics", 1200), ("Benelux", 950.5), ("Iberia", 400)]):
        ws.write(i + 1, 0, region)
        ws.write_number(i + 1, 1, budget)
        ws.write_datetime(i + 1, 2, datetime.datetime(2025, 3, 14 + i), dates)
    wb.add_worksheet("Empty")
    wb.close()
    with open(os.path.join(out, "stock.csv"), "w") as f:
        f.write('Item,Warehouse,Units\n"Hob, induction",Tilburg,120\nKettle,Kazan,80\n')


ODT_CONTENT = """<?xml version="1.0" encoding="UTF-8"?>
<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"
 xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"
 xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"
 xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"
 xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"
 xmlns:xlink="http://www.w3.org/1999/xlink" office:version="1.3">
<office:body><office:text>
<text:h text:outline-level="1">Warehouse report</text:h>
<text:p>Tilburg<text:s text:c="2"/>handled 41 000 orders &amp; returns.</text:p>
<text:h text:outline-level="2">Sites</text:h>
<text:list><text:list-item><text:p>Tilburg</text:p>
<text:list><text:list-item><text:p>Dock 4</text:p></text:list-item></text:list></text:list-item>
<text:list-item><text:p>Kazan</text:p></text:list-item></text:list>
<table:table><table:table-header-rows><table:table-row>
<table:table-cell><text:p>Site</text:p></table:table-cell><table:table-cell><text:p>Orders</text:p></table:table-cell>
</table:table-row></table:table-header-rows>
<table:table-row><table:table-cell><text:p>Tilburg</text:p></table:table-cell><table:table-cell><text:p>41000</text:p></table:table-cell></table:table-row>
</table:table>
<text:p><draw:frame draw:name="Image1"><svg:title>Floor plan of the Tilburg warehouse</svg:title><draw:image xlink:href="Pictures/plan.png"/></draw:frame>Figure 4: The warehouse floor.</text:p>
</office:text></office:body></office:document-content>
"""


def make_odt(out):
    with zipfile.ZipFile(os.path.join(out, "report.odt"), "w") as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.text", zipfile.ZIP_STORED)
        z.writestr("content.xml", ODT_CONTENT, zipfile.ZIP_DEFLATED)
        z.writestr(
            "meta.xml",
            '<office:document-meta xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
            'xmlns:dc="http://purl.org/dc/elements/1.1/"><office:meta><dc:title>Warehouses 2025</dc:title>'
            "</office:meta></office:document-meta>",
        )


def make_bad(out, img):
    bad = os.path.join(out, "bad")
    os.makedirs(bad, exist_ok=True)
    from pypdf import PdfReader, PdfWriter

    w = PdfWriter(clone_from=PdfReader(os.path.join(out, "report.pdf")))
    w.encrypt(user_password="secret", owner_password="owner", algorithm="RC4-128")
    with open(os.path.join(bad, "encrypted.pdf"), "wb") as f:
        w.write(f)

    scan = FPDF()
    scan.add_page()
    scan.image(img, x=10, y=10, w=180)
    scan.output(os.path.join(bad, "scan.pdf"))

    w = PdfWriter(clone_from=PdfReader(os.path.join(out, "report.pdf")))
    from pypdf.generic import NameObject, NumberObject

    fonts = w.pages[1]["/Resources"].get_object()["/Font"].get_object()
    for k in list(fonts.keys()):
        fonts[NameObject(k)] = NumberObject(7)
    with open(os.path.join(bad, "onebadpage.pdf"), "wb") as f:
        w.write(f)

    data = open(os.path.join(out, "report.pdf"), "rb").read()
    open(os.path.join(bad, "truncated.pdf"), "wb").write(data[: len(data) * 2 // 5])
    open(os.path.join(bad, "notzip.docx"), "w").write("this is plain text, not a zip\n")

    with zipfile.ZipFile(os.path.join(bad, "bomb.docx"), "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        with z.open("word/document.xml", "w", force_zip64=True) as f:
            block = b"\0" * (1 << 20)
            for _ in range(300):
                f.write(block)


def main():
    top = sys.argv[1]
    out = os.path.join(top, "docs")
    os.makedirs(out, exist_ok=True)
    img = chart_png(os.path.join(out, "chart.png"))
    pdf_truth = make_pdf(out, img)
    make_docx(out, img)
    pptx_truth = make_pptx(out, img)
    with open(os.path.join(out, "page.html"), "w") as f:
        f.write(HTML)
    make_sheets(out)
    make_odt(out)
    make_bad(out, img)
    os.remove(img)
    truth = {
        "report.pdf": {"pages": pdf_truth, "header": HEADER, "caption": CAPTION, "table": TABLE},
        "slides.pptx": {"slides": pptx_truth},
    }
    with open(os.path.join(top, "truth.json"), "w") as f:
        json.dump(truth, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()

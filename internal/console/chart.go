package console

import (
	"fmt"
	"html/template"
	"math"
	"strings"
)

// barChart is a stacked bar chart drawn server-side as inline SVG: no
// script, readable without one, and it prints.
type barChart struct {
	// Label names the chart for screen readers.
	Label string
	// X labels each bar; every series has one value per bar.
	X      []string
	Series []series
	// Unit is the values' unit, shown on the axis.
	Unit string
}

// series is one stacked layer of a chart.
type series struct {
	Name   string
	Color  string
	Values []float64
}

// palette has colours distinct on a white background and for the common
// colour-vision deficiencies (Okabe-Ito).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"}

// SVG draws the chart.
func (c barChart) SVG() template.HTML {
	const w, h, left, bottom, top, right = 760.0, 260.0, 56.0, 40.0, 12.0, 12.0
	max := 0.0
	for i := range c.X {
		sum := 0.0
		for _, s := range c.Series {
			sum += s.Values[i]
		}
		max = math.Max(max, sum)
	}
	scale := niceCeil(max)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" aria-label="%s" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" xmlns="http://www.w3.org/2000/svg">`,
		template.HTMLEscapeString(c.Label), w, h, w, h)
	fmt.Fprintf(&b, `<title>%s</title>`, template.HTMLEscapeString(c.Label))
	plotH, plotW := h-bottom-top, w-left-right
	// Grid lines and the axis at 0, ½ and 1 of the scale.
	for _, f := range []float64{0, 0.5, 1} {
		y := top + plotH*(1-f)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c9ccd1"/>`, left, y, w-right, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end" fill="#1a1a1a">%s</text>`, left-6, y+4, trimFloat(scale*f))
	}
	fmt.Fprintf(&b, `<text x="12" y="%.1f" font-size="11" fill="#1a1a1a" transform="rotate(-90 12 %.1f)" text-anchor="middle">%s</text>`,
		top+plotH/2, top+plotH/2, template.HTMLEscapeString(c.Unit))
	n := len(c.X)
	if n > 0 {
		slot := plotW / float64(n)
		bw := math.Max(1, slot*0.7)
		every := int(math.Ceil(float64(n) / 12)) // at most about 12 labels
		for i, x := range c.X {
			bx := left + slot*float64(i) + (slot-bw)/2
			y := top + plotH
			for _, s := range c.Series {
				v := s.Values[i]
				if v <= 0 || scale == 0 {
					continue
				}
				bh := plotH * v / scale
				y -= bh
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s %s</title></rect>`,
					bx, y, bw, bh, s.Color, template.HTMLEscapeString(x), template.HTMLEscapeString(s.Name), trimFloat(v), template.HTMLEscapeString(c.Unit))
			}
			if i%every == 0 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle" fill="#1a1a1a">%s</text>`,
					bx+bw/2, h-bottom+16, template.HTMLEscapeString(x))
			}
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // every interpolated string above is escaped
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, at least 1.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

//! The benches' plots share one look: series as lines 2 px wide, measured
//! points as filled circles, a legend in a white box with a black border.
//! A plot draws its series through these, so it says only what it shows.

use plotters::{coord::CoordTranslate, prelude::*};

/// A drawing's result on backend `DB`.
pub type Drawn<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A line through `pts` in `color`, with a legend entry when labelled.
pub fn line<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    pts: impl IntoIterator<Item = (f64, f64)>,
    color: RGBAColor,
    label: Option<&str>,
) -> Drawn<DB>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate<From = (f64, f64)>,
{
    let drawn = chart.draw_series(LineSeries::new(pts, color.stroke_width(2)))?;
    if let Some(label) = label {
        drawn.label(label).legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
        });
    }
    Ok(())
}

/// A filled circle in `color` at each of `pts`.
pub fn dots<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    pts: impl IntoIterator<Item = (f64, f64)>,
    color: RGBAColor,
) -> Drawn<DB>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate<From = (f64, f64)>,
{
    chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))?;
    Ok(())
}

/// The legend of the labelled series, at `at`.
pub fn legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
) -> Drawn<DB>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
}

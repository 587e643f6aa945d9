//! Writes a demo page with an 8x8 heatmap (one failing pair) and a line chart,
//! for eyeballing the SVG output: `cargo run --example svg_demo -- /tmp/svg-demo.html`.

use nodecert::report::svg::{
    heatmap, line_chart, AxisFormat, CellStatus, HeatCell, Heatmap, LineChart, Series,
};

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "svg-demo.html".to_string());
    let labels: Vec<String> = (0..8).map(|i| format!("GPU{i}")).collect();
    let cells = (0..8)
        .map(|r| {
            (0..8)
                .map(|c| match (r, c) {
                    _ if r == c => HeatCell {
                        status: CellStatus::NotApplicable,
                        ..Default::default()
                    },
                    (3, 6) => HeatCell {
                        value: Some(41.7),
                        expected: Some(390.0),
                        status: CellStatus::Fail,
                        note: Some("NVLink 3 down, traffic fell back to PCIe".into()),
                    },
                    (6, 3) => HeatCell {
                        value: Some(352.0),
                        expected: Some(390.0),
                        status: CellStatus::Warn,
                        note: Some("below 95 % of expected".into()),
                    },
                    _ => HeatCell {
                        value: Some(385.0 + ((r * 7 + c * 3) % 9) as f64),
                        expected: Some(390.0),
                        status: CellStatus::Pass,
                        note: None,
                    },
                })
                .collect()
        })
        .collect();
    let hm = Heatmap {
        title: "GPU-to-GPU copy bandwidth".into(),
        unit: "GB/s".into(),
        row_labels: labels.clone(),
        col_labels: labels,
        cells,
        row_axis: "source".into(),
        col_axis: "destination".into(),
    };
    let sizes: Vec<f64> = (3..=32).map(|k| 2f64.powi(k)).collect();
    let curve = |peak: f64, half: f64| -> Vec<(f64, f64)> {
        sizes.iter().map(|&s| (s, peak * s / (s + half))).collect()
    };
    let chart = LineChart {
        title: "all_reduce bus bandwidth".into(),
        x_label: "message size".into(),
        y_label: "bus bandwidth (GB/s)".into(),
        x_log2: true,
        y_log: false,
        x_format: AxisFormat::Bytes,
        series: vec![
            Series {
                name: "all_reduce (8 GPUs)".into(),
                points: curve(470.0, 3e6),
                dashed: false,
            },
            Series {
                name: "all_gather (8 GPUs)".into(),
                points: curve(430.0, 6e6),
                dashed: false,
            },
            Series {
                name: "acceptance floor".into(),
                points: vec![(8.0, 360.0), (2f64.powi(32), 360.0)],
                dashed: true,
            },
        ],
    };
    let long = Heatmap {
        title: "Long labels, skip and 2x2".into(),
        unit: "µs".into(),
        row_labels: vec!["GPU0 (NVL 0000:1b)".into(), "GPU1 <&\"x\">".into()],
        col_labels: vec!["GPU0 (NVL 0000:1b)".into(), "GPU1 <&\"x\">".into()],
        cells: vec![
            vec![
                HeatCell {
                    status: CellStatus::NotApplicable,
                    ..Default::default()
                },
                HeatCell {
                    value: Some(2.5),
                    expected: None,
                    status: CellStatus::Pass,
                    note: None,
                },
            ],
            vec![
                HeatCell {
                    status: CellStatus::Skip,
                    ..Default::default()
                },
                HeatCell {
                    status: CellStatus::NotApplicable,
                    ..Default::default()
                },
            ],
        ],
        row_axis: String::new(),
        col_axis: String::new(),
    };
    let latency = LineChart {
        title: "latency (log y, with a zero that is skipped)".into(),
        x_label: "message size".into(),
        y_label: "µs".into(),
        x_log2: true,
        y_log: true,
        x_format: AxisFormat::Bytes,
        series: vec![Series {
            name: "p2p latency".into(),
            points: sizes
                .iter()
                .map(|&s| (s, 2.0 + s / 4e8))
                .chain([(64.0, 0.0)])
                .collect(),
            dashed: false,
        }],
    };
    let page = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>nodecert SVG demo</title>\
         <style>body{{font-family:system-ui,sans-serif;margin:16px;max-width:760px}}\
         figure{{margin:0 0 24px}}</style></head><body>\
         <h1>nodecert SVG demo</h1><figure>{}</figure><figure>{}</figure>\
         <figure>{}</figure><figure>{}</figure><figure>{}</figure></body></html>\n",
        heatmap(&hm),
        line_chart(&chart),
        heatmap(&long),
        line_chart(&latency),
        heatmap(&Heatmap {
            title: "empty".into(),
            ..Default::default()
        }),
    );
    std::fs::write(&path, page).expect("write demo page");
    println!("wrote {path}");
}

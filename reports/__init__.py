"""What a run is shown as: the HTML precision report, the Markdown summary, the files a
finished run is written to."""

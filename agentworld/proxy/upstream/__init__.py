"""The upstream side of a call: the HTTP client of generation calls (``client``), parsing
an engine's answer with its prompt ids kept as bytes (``answer_json``), the headers that
go up and come back (``headers``), and what a failed upstream call is (``faults``)."""

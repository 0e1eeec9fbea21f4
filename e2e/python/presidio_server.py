"""Presidio's analyzer REST API on a free loopback port, for the guardrail services' e2e test.

It serves what the presidio-analyzer image's app.py serves (POST /analyze, GET /health, GET
/supportedentities), with the real AnalyzerEngine of the presidio-analyzer package; the English
pipeline is a blank spaCy one (the pattern recognizers need no trained model; PERSON and other
NER entities are not found). tldextract is told not to fetch the public suffix list: the test
sends nothing off this machine. Prints "listening <port>" once it serves.
"""

import json
import sys

import tldextract
import tldextract.tldextract
from flask import Flask, Response, jsonify, request
from presidio_analyzer import AnalyzerEngine, AnalyzerRequest
from presidio_analyzer.nlp_engine import NlpEngineProvider
from werkzeug.serving import make_server

tldextract.tldextract.TLD_EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=())

pipeline = sys.argv[1]
nlp = NlpEngineProvider(
    nlp_configuration={"nlp_engine_name": "spacy", "models": [{"lang_code": "en", "model_name": pipeline}]}
).create_engine()
engine = AnalyzerEngine(nlp_engine=nlp, supported_languages=["en"])
app = Flask(__name__)


@app.route("/health")
def health() -> str:
    return "Presidio Analyzer service is up"


@app.route("/analyze", methods=["POST"])
def analyze():
    try:
        req = AnalyzerRequest(request.get_json())
        if not req.text:
            raise ValueError("No text provided")
        if not req.language:
            raise ValueError("No language provided")
        results = engine.analyze(
            text=req.text,
            language=req.language,
            correlation_id=req.correlation_id,
            score_threshold=req.score_threshold,
            entities=req.entities,
            return_decision_process=req.return_decision_process,
            ad_hoc_recognizers=req.ad_hoc_recognizers,
            context=req.context,
            allow_list=req.allow_list,
            allow_list_match=req.allow_list_match,
            regex_flags=req.regex_flags,
        )
        return Response(
            json.dumps(results, default=lambda o: o.to_dict(), sort_keys=True),
            content_type="application/json",
        )
    except Exception as e:  # noqa: BLE001 - the upstream app answers every failure so
        return jsonify(error=e.args[0] if e.args else str(e)), 500


@app.route("/supportedentities")
def supported_entities():
    return jsonify(engine.get_supported_entities(request.args.get("language", "en")))


server = make_server("127.0.0.1", 0, app, threaded=True)
print(f"listening {server.server_port}", flush=True)
server.serve_forever()

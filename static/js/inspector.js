/* Query inspector: keep the what-if readouts in step with the controls. Progressive enhancement only:
   without it every control still submits with the form; htmx (hx-trigger on the form) does the re-ranking. */
(function () {
  "use strict";

  function show(value, unit) {
    var number = Number(value);
    if (!isFinite(number)) { return value; }
    var text = String(Number(number.toPrecision(4)));
    return unit ? text + " " + unit : text;
  }

  function setOutput(input) {
    var output = document.getElementById(input.getAttribute("data-output"));
    if (output) { output.textContent = show(input.value, input.getAttribute("data-unit") || ""); }
    markChanged(input, Number(input.value) !== Number(input.getAttribute("data-saved")));
  }

  // Highlight a control whose value differs from the saved setting (the server does it on a full render).
  function markChanged(input, changed) {
    var knob = input.closest(".knob");
    if (knob) { knob.classList.toggle("changed", changed); }
  }

  document.addEventListener("change", function (event) {
    var input = event.target;
    if (input.matches && input.matches(".knob input[type=checkbox]")) {
      markChanged(input, String(input.checked) !== input.getAttribute("data-saved"));
    }
  });

  document.addEventListener("input", function (event) {
    var input = event.target;
    if (!input.matches) { return; }
    // A logarithmic slider has no name: it drives the number field that the form submits.
    if (input.matches("input[data-log-for]")) {
      var number = document.getElementById(input.getAttribute("data-log-for"));
      if (number) {
        number.value = String(Number(Math.pow(10, Number(input.value)).toPrecision(3)));
        setOutput(number);
      }
      return;
    }
    if (input.matches("input[data-output]")) {
      setOutput(input);
      var slider = document.querySelector("input[data-log-for='" + input.id + "']");
      if (slider && Number(input.value) > 0) { slider.value = String(Math.log10(Number(input.value))); }
    }
  });
})();

// rmq console: polls the broker's /api every few seconds and draws the
// tables; no library, no build step.
(function () {
  'use strict';
  var REFRESH_MS = 3000;
  var selected = null;

  function $(id) { return document.getElementById(id); }

  function api(path, opts) {
    return fetch(path, opts).then(function (r) {
      return r.json().then(function (j) {
        if (!r.ok) { throw new Error(j.error || ('HTTP ' + r.status)); }
        return j;
      });
    });
  }

  function cell(tr, text, cls) {
    var td = document.createElement('td');
    td.textContent = text === undefined || text === null ? '-' : String(text);
    if (cls) { td.className = cls; }
    tr.appendChild(td);
    return td;
  }

  function fmt(n, digits) {
    if (n === undefined || n === null) { return '-'; }
    return Number(n).toFixed(digits || 0);
  }

  function bytes(n) {
    if (n === undefined || n === null) { return '-'; }
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + ' ' + u[i];
  }

  // A sparkline of numbers, as an inline SVG.
  function spark(values) {
    var ns = 'http://www.w3.org/2000/svg', w = 120, h = 20;
    var svg = document.createElementNS(ns, 'svg');
    svg.setAttribute('class', 'spark');
    svg.setAttribute('width', w);
    svg.setAttribute('height', h);
    if (!values || values.length === 0) { return svg; }
    var max = Math.max.apply(null, values.concat([1]));
    var pts = values.map(function (v, i) {
      var x = values.length === 1 ? w : (i * w) / (values.length - 1);
      return x.toFixed(1) + ',' + (h - 1 - (v / max) * (h - 2)).toFixed(1);
    });
    var pl = document.createElementNS(ns, 'polyline');
    pl.setAttribute('points', pts.join(' '));
    svg.appendChild(pl);
    return svg;
  }

  function fill(tbodyParent, rows, draw) {
    var tb = tbodyParent.querySelector('tbody');
    tb.textContent = '';
    rows.forEach(function (r) { tb.appendChild(draw(r)); });
  }

  function drawCluster(c) {
    var rows = [];
    (c.brokers || []).forEach(function (b) { rows.push(b); });
    fill($('brokers'), rows, function (b) {
      var tr = document.createElement('tr');
      tr.className = 'broker';
      cell(tr, b.cluster); cell(tr, b.brokerName); cell(tr, b.brokerId); cell(tr, b.role);
      cell(tr, b.addr); cell(tr, b.version);
      cell(tr, fmt(b.tpsIn, 1), 'num'); cell(tr, fmt(b.tpsOut, 1), 'num');
      cell(tr, b.diskRatio === undefined ? '-' : (b.diskRatio * 100).toFixed(1) + ' %', 'num');
      cell(tr, bytes(b.storeBytes), 'num');
      return tr;
    });
  }

  // Broker sets of the controller (a broker in controller mode): master,
  // epoch and SyncStateSet of each; hidden otherwise.
  function drawController(c) {
    var sets = (c && c.sets) || [];
    $('controller').hidden = sets.length === 0;
    $('controller-addr').textContent = c && c.controller ? c.controller : '';
    function members(list) {
      return (list || []).map(function (m) {
        return m.brokerId + (m.alive ? '' : ' (down)');
      }).join(', ');
    }
    fill($('controller-sets'), sets, function (x) {
      var tr = document.createElement('tr');
      tr.className = 'broker-set';
      cell(tr, x.brokerName); cell(tr, x.masterBrokerId === undefined ? '-' : x.masterBrokerId, 'num');
      cell(tr, x.masterAddress || '-'); cell(tr, x.masterEpoch, 'num');
      cell(tr, members(x.inSync)); cell(tr, x.syncStateSetEpoch, 'num'); cell(tr, members(x.notInSync));
      return tr;
    });
  }

  function drawTopics(t) {
    var all = $('show-system').checked;
    var rows = (t.topics || []).filter(function (x) { return all || !x.system; });
    fill($('topic-table'), rows, function (x) {
      var tr = document.createElement('tr');
      tr.className = 'topic';
      tr.dataset.topic = x.topic;
      cell(tr, x.topic); cell(tr, x.queues, 'num'); cell(tr, x.messages, 'num messages');
      cell(tr, fmt(x.tpsIn, 1), 'num');
      return tr;
    });
  }

  function drawGroups(g) {
    var all = $('show-system').checked;
    var rows = (g.groups || []).filter(function (x) { return all || !x.system; });
    fill($('group-table'), rows, function (x) {
      var tr = document.createElement('tr');
      tr.className = 'group clickable';
      tr.dataset.group = x.group;
      cell(tr, x.group); cell(tr, x.members, 'num');
      cell(tr, x.lag, 'num lag'); cell(tr, fmt(x.consumeTps, 1), 'num');
      cell(tr, '').appendChild(spark(x.lagHistory));
      tr.addEventListener('click', function () { selected = x.group; refreshGroup(); });
      return tr;
    });
  }

  function refreshGroup() {
    if (!selected) { return Promise.resolve(); }
    return api('/api/group?name=' + encodeURIComponent(selected)).then(function (d) {
      $('group-detail').hidden = false;
      $('group-name').textContent = d.group + ' (' + (d.members || []).length + ' members: ' +
        (d.members || []).join(', ') + ')';
      fill($('queue-table'), d.queues || [], function (q) {
        var tr = document.createElement('tr');
        cell(tr, q.topic); cell(tr, q.queueId, 'num'); cell(tr, q.brokerOffset, 'num');
        cell(tr, q.consumerOffset, 'num'); cell(tr, q.lag, 'num lag');
        cell(tr, '').appendChild(spark(q.lagHistory));
        return tr;
      });
    });
  }

  function refresh() {
    // The controller's view is optional: its error leaves the rest shown.
    var ctl = api('/api/controller').catch(function () { return null; });
    return Promise.all([api('/api/cluster'), api('/api/topics'), api('/api/groups'), ctl])
      .then(function (r) {
        drawCluster(r[0]); drawTopics(r[1]); drawGroups(r[2]); drawController(r[3]);
        $('status').textContent = 'updated ' + new Date().toLocaleTimeString();
        $('status').className = '';
        return refreshGroup();
      })
      .catch(function (e) {
        $('status').textContent = 'error: ' + e.message;
        $('status').className = 'err';
      });
  }

  $('show-system').addEventListener('change', refresh);

  $('lookup-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var q = [];
    if ($('lk-id').value) { q.push('id=' + encodeURIComponent($('lk-id').value)); }
    if ($('lk-key').value) { q.push('key=' + encodeURIComponent($('lk-key').value)); }
    if ($('lk-topic').value) { q.push('topic=' + encodeURIComponent($('lk-topic').value)); }
    api('/api/message?' + q.join('&')).then(function (d) {
      $('lookup-out').textContent = JSON.stringify(d.messages, null, 2);
    }).catch(function (e) { $('lookup-out').textContent = e.message; });
  });

  $('send-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var msg = { topic: $('sd-topic').value, body: $('sd-body').value };
    if ($('sd-tags').value) { msg.tags = $('sd-tags').value; }
    if ($('sd-keys').value) { msg.keys = $('sd-keys').value; }
    api('/api/send', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                       body: JSON.stringify(msg) })
      .then(function (d) { $('send-out').textContent = JSON.stringify(d, null, 2); refresh(); })
      .catch(function (e) { $('send-out').textContent = e.message; });
  });

  refresh();
  setInterval(refresh, REFRESH_MS);
})();

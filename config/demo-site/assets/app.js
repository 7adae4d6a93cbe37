document.getElementById('status').textContent = 'scripts ran';
